// A mutation that selects only its success type answers {} for an expected error; with `... on Error`, the error.
// A dropoff with no address: the platform group refuses it before any upstream call.
const url = `http://127.0.0.1:${process.env.PORT ?? 4000}/graphql`;
const key = 'sk_test_demo_merchant';

const mutation = (selection) => `mutation($input: DeliveryInput!) { createDelivery(input: $input) { ${selection} } }`;
const input = {
  pickup: {
    name: 'Ada Shop',
    email: 'shop@example.com',
    address: { street: 'Main St', city: 'Springfield', country: 'US' },
  },
  dropoff: { name: 'Grace' },
  mode: 'NOW',
};
async function book(selection) {
  const response = await fetch(url, {
    method: 'POST',
    headers: { 'content-type': 'application/json', authorization: `Bearer ${key}` },
    body: JSON.stringify({ query: mutation(selection), variables: { input } }),
  });
  return JSON.stringify(await response.json());
}
console.log('success only:', await book('... on MutationCreateDeliverySuccess { data { uid } }'));
console.log(
  'with Error:  ',
  await book('... on MutationCreateDeliverySuccess { data { uid } } ... on Error { code message }'),
);

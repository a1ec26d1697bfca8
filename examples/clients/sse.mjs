// graphql-sse (tested with `graphql-sse` 2) in its default distinct-connections mode: one POST with
// accept: text/event-stream per subscription. Follows the delivery whose uid is the first argument until it ends.
import { createClient } from 'graphql-sse';

const client = createClient({
  url: `http://127.0.0.1:${process.env.PORT ?? 4000}/graphql`,
  headers: { authorization: 'Bearer sk_test_demo_merchant' },
});
const FOLLOW = 'subscription Follow($uid: ID!) { deliveryUpdated(uid: $uid) { name status } }';
for await (const result of client.iterate({ query: FOLLOW, variables: { uid: process.argv[2] } })) {
  if (result.errors) throw new Error(result.errors[0].message);
  console.log('sse', result.data.deliveryUpdated.status);
}
client.dispose();

// Nothing the upstream gives is lost on the way through (issue 21, item 8):
// a partner order's style, which only its read by reference carries.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { deliveryInput, partnerOrderBody, startStack, type Stack } from '../helpers/stack.js';

let stack: Stack;
beforeAll(async () => {
  stack = await startStack();
});
afterAll(() => stack?.stop());

/** The sandbox requests since `mark`, as "METHOD path". */
function callsSince(mark: number): string[] {
  return stack.sandbox.requestsSince(mark).map((r) => `${r.method} ${r.path}`);
}

describe("a partner order's style, read by uid", () => {
  const seed = (reference: string, style: string) =>
    stack.sandbox.seedPartnerOrder(stack.key, partnerOrderBody(reference, { delivery_style: style })).uid as string;

  it('comes from the read by reference, only when selected, once per order', async () => {
    const fragile = seed('PO-style-1', 'Special Handling');
    const plain = seed('PO-style-2', 'Standard');

    // The first read of an order booked outside the facade proves it the merchant's by its read by reference
    // (UPSTREAM_READ_SCOPE is platform by default: a read by uid proves nothing).
    const bareQuery = `query($uids: [ID!]!) { deliveries(uids: $uids, group: PARTNER) { uid partnerReference } }`;
    let mark = stack.sandbox.requestCount;
    expect((await stack.gql(bareQuery, { uids: [fragile, plain] })).errors).toBeUndefined();
    expect(
      callsSince(mark)
        .filter((c) => c.includes('/orders/partner/'))
        .sort(),
    ).toEqual(['GET /api/v1/orders/partner/PO-style-1', 'GET /api/v1/orders/partner/PO-style-2']);
    expect(callsSince(mark)).toHaveLength(4);

    // Proven: without a style field, one read per order, by uid, nothing more.
    mark = stack.sandbox.requestCount;
    const bare = await stack.gql(bareQuery, { uids: [fragile, plain] });
    expect(bare.errors).toBeUndefined();
    expect(callsSince(mark).filter((c) => c.includes('/orders/partner/'))).toEqual([]);
    expect(callsSince(mark)).toHaveLength(2);

    // With style and rawStyle, each order listed twice: one read by reference per order.
    mark = stack.sandbox.requestCount;
    const styled = await stack.gql(
      `query($uids: [ID!]!) { deliveries(uids: $uids, group: PARTNER) { uid style rawStyle } }`,
      { uids: [fragile, plain, fragile, plain] },
    );
    expect(styled.errors).toBeUndefined();
    expect(styled.data.deliveries).toEqual([
      { uid: fragile, style: 'SPECIAL_HANDLING', rawStyle: 'Special Handling' },
      { uid: plain, style: 'STANDARD', rawStyle: 'Standard' },
      { uid: fragile, style: 'SPECIAL_HANDLING', rawStyle: 'Special Handling' },
      { uid: plain, style: 'STANDARD', rawStyle: 'Standard' },
    ]);
    const calls = callsSince(mark);
    expect(calls.filter((c) => c.includes('/orders/partner/')).sort()).toEqual([
      'GET /api/v1/orders/partner/PO-style-1',
      'GET /api/v1/orders/partner/PO-style-2',
    ]);
    expect(calls).toHaveLength(4);
  });

  it('costs nothing more when the order was read by reference already', async () => {
    seed('PO-style-3', 'Special Handling');
    const mark = stack.sandbox.requestCount;
    const read = await stack.gql(`{ deliveryByReference(partnerReference: "PO-style-3") { style } }`);
    expect(read.data.deliveryByReference.style).toBe('SPECIAL_HANDLING');
    expect(callsSince(mark)).toHaveLength(1);
  });

  it('is not asked for a platform delivery, whose read carries it', async () => {
    const booked = await stack.gql(
      `mutation($input: DeliveryInput!) { createDelivery(input: $input) { ... on MutationCreateDeliverySuccess { data { uid } } } }`,
      {
        input: deliveryInput({ style: 'SPECIAL_HANDLING' }),
      },
    );
    const uid = booked.data.createDelivery.data.uid as string;
    const mark = stack.sandbox.requestCount;
    const read = await stack.gql(`query($uid: ID!) { delivery(uid: $uid) { style } }`, { uid });
    expect(read.data.delivery.style).toBe('SPECIAL_HANDLING');
    expect(callsSince(mark)).toHaveLength(1);
  });
});

describe('item prices, both ways in the amount unit', () => {
  const ITEMS = `query($uid: ID!) { delivery(uid: $uid) { package { items { name price } declaredValue } tip } }`;
  const book = (target: Stack) =>
    target.gql(
      `mutation($input: DeliveryInput!) { createDelivery(input: $input) { ... on MutationCreateDeliverySuccess { data { uid } } } }`,
      {
        input: deliveryInput({
          items: [
            { name: 'Atlas', quantity: 1, price: '12.34' },
            { name: 'Map', quantity: 2, price: '0.05' },
            { name: 'Pen' },
          ],
        }),
      },
    );

  it('come back as they were given (cents on the wire, the default)', async () => {
    const uid = (await book(stack)).data.createDelivery.data.uid as string;
    const read = await stack.gql(ITEMS, { uid });
    expect(read.errors).toBeUndefined();
    expect(read.data.delivery.package.items).toEqual([
      { name: 'Atlas', price: '12.34' },
      { name: 'Map', price: '0.05' },
      { name: 'Pen', price: null },
    ]);
    // The amounts the document converts from cents on read stay as they were.
    expect(read.data.delivery.tip).toBe('3.50');
    expect(read.data.delivery.package.declaredValue).toBe('45.10');
  });

  it('come back as they were given with UPSTREAM_AMOUNT_UNIT=major', async () => {
    const major = await startStack({ env: { UPSTREAM_AMOUNT_UNIT: 'major' } });
    try {
      const uid = (await book(major)).data.createDelivery.data.uid as string;
      const read = await major.gql(ITEMS, { uid });
      expect(read.data.delivery.package.items.map((i: { price: string | null }) => i.price)).toEqual([
        '12.34',
        '0.05',
        null,
      ]);
    } finally {
      await major.stop();
    }
  });
});

describe("the upstream's own code and message on a refusal", () => {
  const CANCEL = `mutation($uid: ID!, $group: ApiGroup!) { cancelDelivery(uid: $uid, group: $group) { __typename ... on Error { code message upstream { status error message } } } }`;

  it('is on a cancel refused as not found, and as not cancelable (409), on both groups', async () => {
    const missing = await stack.gql(CANCEL, { uid: '00000000-0000-4000-8000-000000000000', group: 'PARTNER' });
    expect(missing.data.cancelDelivery).toMatchObject({
      __typename: 'NotFoundError',
      upstream: { status: 404, error: 'not_found', message: 'No order with this uid.' },
    });

    const uid = stack.sandbox.seedPartnerOrder(stack.key, partnerOrderBody('PO-refusal-1')).uid as string;
    while (
      (await stack.gql(`query($uid: ID!) { delivery(uid: $uid, group: PARTNER) { status } }`, { uid })).data.delivery
        .status !== 'PICKUP_COMPLETE'
    ) {
      await stack.sandbox.advance(uid);
    }
    const late = await stack.gql(CANCEL, { uid, group: 'PARTNER' });
    expect(late.data.cancelDelivery).toEqual({
      __typename: 'NotCancelableError',
      code: 'NOT_CANCELABLE',
      message: 'The delivery can no longer be canceled.',
      upstream: {
        status: 409,
        error: 'not_cancelable',
        message: 'The order can no longer be canceled: it was picked up, delivered or already canceled.',
      },
    });
  });

  it('is in extensions.upstream of an UNAUTHENTICATED error, without the key', async () => {
    const forged = 'sk_test_forged_key_0123456789abcdef';
    const read = await stack.gql(
      `query($uid: ID!) { delivery(uid: $uid) { uid } }`,
      { uid: '00000000-0000-4000-8000-000000000000' },
      forged,
    );
    expect(read.errors?.[0]?.extensions).toEqual({
      code: 'UNAUTHENTICATED',
      upstream: { status: 401, error: 'invalid_api_key', message: expect.any(String) },
    });
    expect(JSON.stringify(read)).not.toContain(forged);
  });

  it('is on a ValidationError the upstream gave', async () => {
    // The sandbox refuses an Oversize style without a vehicle size; the facade lets a style it does not know through.
    const quote = await stack.gql(
      `mutation($input: DeliveryInput!) { quoteDelivery(input: $input) { __typename ... on ValidationError { upstream { status error message } } } }`,
      { input: deliveryInput({ rawStyle: 'White Glove' }) },
    );
    expect(quote.data.quoteDelivery.__typename).toBe('ValidationError');
    expect(quote.data.quoteDelivery.upstream).toMatchObject({
      status: expect.any(Number),
      message: expect.stringContaining('delivery_style'),
    });
  });
});

// What a cancel proves, through the one ownership path (src/access/prove.ts),
// against the sandbox over real HTTP with a real SQLite file. A cancel the
// upstream made for a key is a merchant-scoped proof (it cancels its caller's own
// only): recorded for a delivery the caller's merchant already had a record of,
// too, so a record learned from a read gives way to it. On a key-scoped upstream
// the read a cancel makes first is a proof of its own, recorded as every other
// path records it, whatever the cancel then says.
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { hashKey } from '../../src/domain/merchant-key.js';
import { partnerOrderBody, startStack, type Stack } from '../helpers/stack.js';

const CANCEL = `mutation($uid: ID!) { cancelDelivery(uid: $uid, group: PARTNER) { __typename ... on Error { code } } }`;

/** A partner order of the stack's merchant that the facade has never seen. */
const seedOrder = (stack: Stack, reference: string) =>
  stack.sandbox.seedPartnerOrder(stack.key, partnerOrderBody(reference)).uid;

describe('on a platform-scoped upstream', () => {
  let stack: Stack;
  beforeAll(async () => {
    stack = await startStack({ sandbox: { knobs: { readScope: 'platform' } } });
  });
  afterAll(async () => {
    await stack?.stop();
  });

  it("records the caller's own cancel as proof: a record learned from a read becomes `canceled`", async () => {
    const uid = seedOrder(stack, `CANCEL-OWN-${Date.now()}`);
    const { store } = stack.app.services;
    // Learned from a read (as a key-scoped upstream, or a facade from before proofs, left it): the caller's own.
    await store.recordOwner(uid, hashKey(stack.key), 'PARTNER', 'read');
    const canceled = await stack.gql(CANCEL, { uid });
    expect(canceled.data.cancelDelivery.__typename).toBe('MutationCancelDeliverySuccess');
    await vi.waitFor(
      async () =>
        expect((await store.ownersOf([uid])).get(uid)).toEqual({
          owner: hashKey(stack.key),
          group: 'PARTNER',
          proof: 'canceled',
        }),
      { timeout: 2_000, interval: 50 },
    );
  });
});

describe('on a key-scoped upstream', () => {
  let stack: Stack;
  beforeAll(async () => {
    stack = await startStack({ env: { UPSTREAM_READ_SCOPE: 'key' } });
  });
  afterAll(async () => {
    await stack?.stop();
  });

  it('records the read a cancel made first, though the cancel is refused', async () => {
    const uid = seedOrder(stack, `CANCEL-LATE-${Date.now()}`);
    for (let step = 0; step < 4; step += 1) await stack.sandbox.advance(uid);
    const refused = await stack.gql(CANCEL, { uid });
    expect(refused.data.cancelDelivery).toEqual({ __typename: 'NotCancelableError', code: 'NOT_CANCELABLE' });
    const { store } = stack.app.services;
    await vi.waitFor(
      async () =>
        expect((await store.ownersOf([uid])).get(uid)).toEqual({
          owner: hashKey(stack.key),
          group: 'PARTNER',
          proof: 'read',
        }),
      { timeout: 2_000, interval: 50 },
    );
    // Another merchant's cancel of it is refused as for an unknown uid, and records nothing of its own.
    const theirs = await stack.gql(CANCEL, { uid }, stack.otherKey);
    expect(theirs.data.cancelDelivery.__typename).toBe('NotFoundError');
    expect((await store.ownersOf([uid])).get(uid)?.owner).toBe(hashKey(stack.key));
  });
});

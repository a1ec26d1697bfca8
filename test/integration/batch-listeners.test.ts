// A batched read of many uids shares its request's one abort signal among all
// its upstream calls. Each call once added its own 'abort' listener to it, and
// Node warned of a leak past ten (MaxListenersExceededWarning); now the signal
// carries one listener however many calls wait on it.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { partnerOrderBody, startStack, type Stack } from '../helpers/stack.js';

let stack: Stack;
beforeAll(async () => {
  // The sandbox scopes reads to the key, and the facade is told so: one read per uid, the upstream decides.
  stack = await startStack({ env: { UPSTREAM_READ_SCOPE: 'key' } });
});
afterAll(() => stack?.stop());

describe('a batched read of 50 distinct uids', () => {
  it('makes 50 upstream calls at once and no warning', async () => {
    const uids = Array.from(
      { length: 50 },
      (_, i) => stack.sandbox.seedPartnerOrder(stack.key, partnerOrderBody(`PO-listeners-${i}`)).uid as string,
    );
    // One read first, so the key is known and the batch's calls all go out together.
    expect(
      (await stack.gql(`query($uid: ID!) { delivery(uid: $uid, group: PARTNER) { uid } }`, { uid: uids[0] })).errors,
    ).toBeUndefined();

    const warnings: string[] = [];
    const onWarning = (warning: Error) => warnings.push(`${warning.name}: ${warning.message}`);
    process.on('warning', onWarning);
    try {
      const mark = stack.sandbox.requestCount;
      const answer = await stack.gql(`query($uids: [ID!]!) { deliveries(uids: $uids, group: PARTNER) { uid } }`, {
        uids,
      });
      expect(answer.errors).toBeUndefined();
      expect(answer.data.deliveries.map((d: { uid: string }) => d.uid)).toEqual(uids);
      expect(stack.sandbox.requestsSince(mark).filter((r) => r.method === 'GET')).toHaveLength(50);
      // Warnings are emitted on the next tick.
      await new Promise((resolve) => setImmediate(resolve));
    } finally {
      process.off('warning', onWarning);
    }
    expect(warnings).toEqual([]);
  });
});

describe('the sandbox under many requests in flight', () => {
  it('waits out latencyMs for 50 requests at once, and sends their webhooks, with no warning', async () => {
    const warnings: string[] = [];
    const onWarning = (warning: Error) => warnings.push(`${warning.name}: ${warning.message}`);
    process.on('warning', onWarning);
    stack.sandbox.setKnobs({ latencyMs: 50 });
    try {
      const reads = Array.from({ length: 50 }, (_, i) =>
        fetch(`${stack.sandbox.url}/orders/partner/none-${i}`, {
          headers: { authorization: `Bearer ${stack.key}` },
        }).then((response) => response.status),
      );
      expect(new Set(await Promise.all(reads))).toEqual(new Set([404]));
      // 50 orders' delivery.created webhooks in flight at once.
      for (let i = 0; i < 50; i += 1) stack.sandbox.seedPartnerOrder(stack.key, partnerOrderBody(`PO-webhooks-${i}`));
      await stack.sandbox.idle();
      await new Promise((resolve) => setImmediate(resolve));
    } finally {
      stack.sandbox.setKnobs({ latencyMs: 0 });
      process.off('warning', onWarning);
    }
    expect(warnings).toEqual([]);
  });
});

// Reconciliation reads the followed deliveries due longest first, as many a tick
// as RECONCILE_MAX_READS_PER_SECOND allows, and in the end every one of them:
// the tick picks them by turns between merchants (src/realtime/fair-reads.ts), each merchant's most late first.
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { Reconciler } from '../../src/realtime/reconcile.js';
import type { Store } from '../../src/store/store.js';
import type { Upstream } from '../../src/upstream/clients.js';

const uid = (n: number) => `00000000-0000-4000-8000-${String(n).padStart(12, '0')}`;

beforeEach(() => {
  vi.useFakeTimers();
  // No jitter: each delivery is due exactly an interval after it was followed.
  vi.spyOn(Math, 'random').mockReturnValue(0);
});
afterEach(() => {
  vi.useRealTimers();
  vi.restoreAllMocks();
});

describe('the reconciliation tick', () => {
  it('reads the deliveries due longest first, within the rate, and every one of them in the end', async () => {
    const read: string[] = [];
    const upstream = {
      platform: {
        get: async (_key: string, id: string) => {
          read.push(id);
          return { uid: id, status: 'delivered' };
        },
      },
      partner: { getOrder: async () => ({}) },
    } as unknown as Upstream;
    const store = {
      deliveryState: async () => undefined,
      latestEvent: async () => undefined,
      lastSeq: async () => 0,
      recordRead: async () => undefined,
    } as unknown as Store;
    const reconciler = new Reconciler({
      store,
      upstream,
      append: async () => ({ duplicate: true }) as never,
      intervalMs: 1_000,
      maxReadsPerSecond: 20,
      finalityGraceMs: 120_000,
    });
    const followed = 300;
    const start = Date.now();
    // Followed a millisecond apart, in an order that is not their uids' order: due in that order.
    const order = Array.from({ length: followed }, (_, n) => uid((n * 7) % followed));
    order.forEach((id, n) => {
      vi.setSystemTime(start + n);
      reconciler.follow(id, { key: 'sk_test', end() {} });
    });
    // All due at once, 20 reads a second: 15 s of ticks reads them all.
    await vi.advanceTimersByTimeAsync(1_000 + followed);
    expect(read.length).toBeLessThanOrEqual(2 * 20);
    await vi.advanceTimersByTimeAsync(16_000);
    reconciler.stop();
    // Every delivery read, the first read of each in the order they fell due.
    const firstReads = read.filter((id, index) => read.indexOf(id) === index);
    expect(firstReads).toEqual(order);
  });
});

// The subscriber queue: positions coalesce once a reader lags, status events never drop, and a reader too far behind is
// cut off.
import { afterEach, describe, expect, it, vi } from 'vitest';
import { SlowConsumerError } from '../../src/errors.js';
import { EventQueue } from '../../src/realtime/queue.js';

type Item = { kind: 'status' | 'location'; uid: string; n: number };
const queue = (maxPending = 100, coalesceAfter = 0, graceMs = 50) => {
  const overflows: number[] = [];
  let ended = 0;
  const q = new EventQueue<Item>({
    maxPending,
    coalesceAfter,
    graceMs,
    coalesceKey: (item) => (item.kind === 'location' ? item.uid : undefined),
    onOverflow: (pending) => overflows.push(pending),
    onEnd: () => (ended += 1),
  });
  return { q, overflows, ended: () => ended };
};
const drain = async (q: EventQueue<Item>, count: number) => {
  const out: Item[] = [];
  for (let i = 0; i < count; i += 1) out.push((await q.next()).value);
  return out;
};

describe('EventQueue', () => {
  // The grace is the queue's own timer: the tests move a fake clock past it (or not) instead of sleeping.
  afterEach(() => {
    vi.useRealTimers();
  });

  it('hands a waiting reader the next item at once', async () => {
    const { q } = queue();
    const next = q.next();
    q.push({ kind: 'location', uid: 'a', n: 1 });
    expect((await next).value).toEqual({ kind: 'location', uid: 'a', n: 1 });
  });

  it('keeps only the latest position per delivery for a lagging reader, in log order, and every status event', async () => {
    const { q } = queue();
    q.push({ kind: 'location', uid: 'a', n: 1 });
    q.push({ kind: 'status', uid: 'a', n: 2 });
    q.push({ kind: 'location', uid: 'a', n: 3 });
    q.push({ kind: 'location', uid: 'b', n: 4 });
    q.push({ kind: 'status', uid: 'a', n: 5 });
    q.push({ kind: 'location', uid: 'a', n: 6 });
    expect(q.pending).toBe(4);
    expect((await drain(q, 4)).map((item) => item.n)).toEqual([2, 4, 5, 6]);
  });

  it('does not coalesce while the reader keeps up', async () => {
    const { q } = queue(100, 3);
    for (let n = 1; n <= 3; n += 1) q.push({ kind: 'location', uid: 'a', n });
    expect(q.pending).toBe(3);
    q.push({ kind: 'location', uid: 'a', n: 4 });
    q.push({ kind: 'location', uid: 'a', n: 5 });
    expect((await drain(q, 4)).map((item) => item.n)).toEqual([1, 2, 3, 5]);
  });

  it('starts a new slot once the coalesced item was read', async () => {
    const { q } = queue();
    q.push({ kind: 'location', uid: 'a', n: 1 });
    expect((await q.next()).value.n).toBe(1);
    q.push({ kind: 'status', uid: 'a', n: 2 });
    q.push({ kind: 'location', uid: 'a', n: 3 });
    expect((await drain(q, 2)).map((item) => item.n)).toEqual([2, 3]);
  });

  it('fails with SlowConsumerError when the reader stays over the limit past the grace, and frees them', async () => {
    vi.useFakeTimers();
    const { q, overflows, ended } = queue(3);
    for (let n = 1; n <= 4; n += 1) q.push({ kind: 'status', uid: 'a', n });
    vi.advanceTimersByTime(49);
    expect(overflows).toEqual([]);
    vi.advanceTimersByTime(1);
    expect(overflows).toEqual([4]);
    expect(ended()).toBe(1);
    expect(q.pending).toBe(0);
    await expect(q.next()).rejects.toBeInstanceOf(SlowConsumerError);
    q.push({ kind: 'status', uid: 'a', n: 5 });
    expect(q.pending).toBe(0);
  });

  it('lets a reader work through a burst over the limit within the grace', async () => {
    vi.useFakeTimers();
    const { q, overflows, ended } = queue(3, 0, 100);
    for (let n = 1; n <= 25; n += 1) q.push({ kind: 'status', uid: 'a', n });
    vi.advanceTimersByTime(99);
    expect((await drain(q, 25)).map((item) => item.n)).toEqual(Array.from({ length: 25 }, (_, i) => i + 1));
    vi.advanceTimersByTime(1_000);
    expect(overflows).toEqual([]);
    expect(ended()).toBe(0);
    q.push({ kind: 'status', uid: 'a', n: 26 });
    expect((await q.next()).value.n).toBe(26);
  });

  it('fails at once past ten times the limit, grace or not', () => {
    const { q, overflows } = queue(3, 0, 60_000);
    for (let n = 1; n <= 31; n += 1) q.push({ kind: 'status', uid: 'a', n });
    expect(overflows).toEqual([31]);
    expect(q.pending).toBe(0);
  });

  it('ends after the waiting items when ended, and at once when returned', async () => {
    const { q, ended } = queue();
    q.push({ kind: 'status', uid: 'a', n: 1 });
    q.end();
    expect((await q.next()).value.n).toBe(1);
    expect((await q.next()).done).toBe(true);
    const other = queue();
    other.q.push({ kind: 'status', uid: 'a', n: 1 });
    await other.q.return();
    expect((await other.q.next()).done).toBe(true);
    expect(ended()).toBe(1);
  });
});

// The key watch alone, on a fake clock and a fake upstream: one confirmation per
// key per interval whatever its number of subscriptions, none when another call
// proved the key, every subscription of a refused key ended, none ended by an
// upstream that cannot answer, and the group that accepted a key asked first.
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { KeyWatch } from '../../src/access/key-watch.js';
import { UnauthenticatedError, UpstreamUnavailableError } from '../../src/errors.js';
import { KnownKeys } from '../../src/upstream/known-keys.js';

const INTERVAL_MS = 1_000;

type Answer = 'accept' | 'refuse' | 'fail';

function fakeUpstream() {
  const keys = new KnownKeys();
  const calls: Array<{ group: 'platform' | 'partner'; key: string }> = [];
  const answers = new Map<string, { platform: Answer; partner: Answer }>();
  const availability = (group: 'platform' | 'partner') => async (key: string) => {
    calls.push({ group, key });
    const answer = answers.get(key)?.[group] ?? 'accept';
    if (answer === 'fail') throw new UpstreamUnavailableError();
    // As the upstream clients do: every answer that judges the key is learned.
    keys.learn(key, group, answer === 'accept');
    if (answer === 'refuse') throw new UnauthenticatedError('The delivery service refused the merchant key.');
    return { available: true };
  };
  const upstream = {
    keys,
    platform: { availability: availability('platform') },
    partner: { availability: availability('partner') },
  };
  return { upstream: upstream as never as ConstructorParameters<typeof KeyWatch>[0]['upstream'], keys, calls, answers };
}

let watch: KeyWatch | undefined;
beforeEach(() => {
  vi.useFakeTimers();
});
afterEach(() => {
  watch?.stop();
  vi.useRealTimers();
});

describe('KeyWatch', () => {
  it('asks once per key per interval, however many subscriptions hold it', async () => {
    const { upstream, calls } = fakeUpstream();
    watch = new KeyWatch({ upstream, intervalMs: INTERVAL_MS });
    for (let i = 0; i < 50; i += 1) watch.hold('sk_one', () => undefined);
    for (let i = 0; i < 5; i += 1) watch.hold('sk_two', () => undefined);
    expect(watch.keys).toBe(2);
    await vi.advanceTimersByTimeAsync(10 * INTERVAL_MS);
    const perKey = (key: string) => calls.filter((call) => call.key === key).length;
    // One each interval: never more than ten in ten intervals, and never a whole interval without one.
    expect(perKey('sk_one')).toBeGreaterThanOrEqual(9);
    expect(perKey('sk_one')).toBeLessThanOrEqual(11);
    expect(perKey('sk_two')).toBe(perKey('sk_one'));
    expect(watch.counters.confirmations.accepted).toBe(calls.length);
  });

  it('asks nothing while other calls keep proving the key, and asks again once they stop', async () => {
    const { upstream, keys, calls } = fakeUpstream();
    watch = new KeyWatch({ upstream, intervalMs: INTERVAL_MS });
    watch.hold('sk_busy', () => undefined);
    const reads = setInterval(() => keys.learn('sk_busy', 'platform', true), INTERVAL_MS / 4);
    await vi.advanceTimersByTimeAsync(5 * INTERVAL_MS);
    expect(calls).toEqual([]);
    expect(watch.counters.proven).toBeGreaterThanOrEqual(4);
    clearInterval(reads);
    await vi.advanceTimersByTimeAsync(2 * INTERVAL_MS);
    expect(calls.length).toBeGreaterThanOrEqual(1);
  });

  it('does not take an acceptance followed by a refusal for a proof', async () => {
    const { upstream, keys, calls } = fakeUpstream();
    watch = new KeyWatch({ upstream, intervalMs: INTERVAL_MS });
    watch.hold('sk_mixed', () => undefined);
    keys.learn('sk_mixed', 'partner', true);
    keys.learn('sk_mixed', 'platform', false);
    await vi.advanceTimersByTimeAsync(INTERVAL_MS);
    expect(calls.length).toBeGreaterThanOrEqual(1);
  });

  it('ends every subscription of a key both groups refuse, and only those', async () => {
    const { upstream, answers, calls } = fakeUpstream();
    watch = new KeyWatch({ upstream, intervalMs: INTERVAL_MS });
    const ended: string[] = [];
    for (let i = 0; i < 3; i += 1) watch.hold('sk_revoked', () => ended.push('revoked'));
    watch.hold('sk_fine', () => ended.push('fine'));
    answers.set('sk_revoked', { platform: 'refuse', partner: 'refuse' });
    await vi.advanceTimersByTimeAsync(INTERVAL_MS);
    expect(ended).toEqual(['revoked', 'revoked', 'revoked']);
    expect(calls.filter((call) => call.key === 'sk_revoked').map((call) => call.group)).toEqual([
      'platform',
      'partner',
    ]);
    expect(watch.counters).toMatchObject({ confirmations: { refused: 1 }, ended: 3 });
    expect(watch.keys).toBe(1);
    // Ended once: nothing more is asked of that key.
    await vi.advanceTimersByTimeAsync(3 * INTERVAL_MS);
    expect(ended).toHaveLength(3);
    expect(calls.filter((call) => call.key === 'sk_revoked')).toHaveLength(2);
  });

  it('ends nothing when the upstream cannot answer, and asks again an interval later', async () => {
    const { upstream, answers, calls } = fakeUpstream();
    watch = new KeyWatch({ upstream, intervalMs: INTERVAL_MS });
    const ended: number[] = [];
    watch.hold('sk_outage', () => ended.push(1));
    answers.set('sk_outage', { platform: 'fail', partner: 'refuse' });
    await vi.advanceTimersByTimeAsync(3 * INTERVAL_MS);
    expect(ended).toEqual([]);
    // One call each time: a failure asks no second group.
    expect(calls.every((call) => call.group === 'platform')).toBe(true);
    expect(watch.counters.confirmations.failed).toBe(calls.length);
    expect(calls.length).toBeGreaterThanOrEqual(2);
  });

  it('asks the group that accepted the key first: one call for a partner-only key', async () => {
    const { upstream, answers, calls } = fakeUpstream();
    watch = new KeyWatch({ upstream, intervalMs: INTERVAL_MS });
    watch.hold('sk_partner', () => undefined);
    answers.set('sk_partner', { platform: 'refuse', partner: 'accept' });
    await vi.advanceTimersByTimeAsync(4 * INTERVAL_MS + 100);
    expect(calls.slice(0, 2).map((call) => call.group)).toEqual(['platform', 'partner']);
    expect(calls.slice(2).every((call) => call.group === 'partner')).toBe(true);
    expect(calls.length).toBeGreaterThanOrEqual(4);
  });

  it('forgets a key once its last subscription ends', async () => {
    const { upstream, calls } = fakeUpstream();
    watch = new KeyWatch({ upstream, intervalMs: INTERVAL_MS });
    const releases = [watch.hold('sk_gone', () => undefined), watch.hold('sk_gone', () => undefined)];
    releases[0]!();
    expect(watch.keys).toBe(1);
    releases[1]!();
    expect(watch.keys).toBe(0);
    await vi.advanceTimersByTimeAsync(3 * INTERVAL_MS);
    expect(calls).toEqual([]);
  });
});

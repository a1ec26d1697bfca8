// The parts of issue 29's item 2 that need no server: a budget charged after
// the work is done (it may go into debt, and the wait pays it back), and the
// address and process budgets of callers without an accepted key.
import { describe, expect, it } from 'vitest';
import { KeyRateLimiter, keylessWorkUnits, RequestLimits, workBudget } from '../../src/access/rate-limit.js';
import { KnownKeys } from '../../src/upstream/known-keys.js';

const clock = () => {
  let now = 0;
  return { now: () => now, advance: (ms: number) => (now += ms) };
};

describe('KeyRateLimiter.charge', () => {
  it('takes what was spent however little is left, and waits until the debt is paid back', () => {
    const time = clock();
    // 60 units a minute: one a second.
    const budget = new KeyRateLimiter(60, time.now);
    expect(budget.wait('a')).toBe(0);
    budget.charge('a', 59);
    expect(budget.wait('a')).toBe(0);
    // 1 left, 31 spent: 30 in debt, then 1 more to have one unit.
    budget.charge('a', 31);
    expect(budget.wait('a')).toBe(31);
    time.advance(30_500);
    expect(budget.wait('a')).toBe(1);
    time.advance(500);
    expect(budget.wait('a')).toBe(0);
    // Another id owes nothing.
    expect(budget.wait('b')).toBe(0);
  });

  it('charges nothing at 0, and nothing for nothing', () => {
    const budget = new KeyRateLimiter(0, clock().now);
    budget.charge('a', 1e9);
    expect(budget.wait('a')).toBe(0);
    const other = new KeyRateLimiter(10, clock().now);
    other.charge('a', 0);
    expect(other.size).toBe(0);
  });
});

describe('a work budget', () => {
  it('holds a tenth of its minute, however long it was left alone: a flood gets its work spread over the minute', () => {
    const time = clock();
    const budget = workBudget(600, time.now);
    time.advance(3_600_000);
    budget.charge('a', 59);
    expect(budget.wait('a')).toBe(0);
    budget.charge('a', 1);
    // Ten units a second: the next one in a tenth of a second (rounded up to a whole second).
    expect(budget.wait('a')).toBe(1);
    time.advance(100);
    expect(budget.wait('a')).toBe(0);
    // Idle again for an hour: still only 60 to spend at once.
    time.advance(3_600_000);
    budget.charge('a', 61);
    expect(budget.wait('a')).toBe(1);
  });
});

describe('the work budgets of callers without an accepted key', () => {
  const limitsWith = (perAddress: number, total: number, now: () => number) =>
    new RequestLimits(
      new KnownKeys(),
      new KeyRateLimiter(0),
      new KeyRateLimiter(0),
      undefined,
      undefined,
      new KeyRateLimiter(0),
      new KeyRateLimiter(perAddress, now),
      new KeyRateLimiter(total, now),
    );

  it('refuses an address once its work passed KEYLESS_WORK_MS_PER_MINUTE, and no other', () => {
    const time = clock();
    const limits = limitsWith(1_000, 0, time.now);
    limits.chargeKeylessWork('198.51.100.1', keylessWorkUnits(900, 64 * 1024 * 200));
    expect(limits.keylessWait('198.51.100.1')).toBeGreaterThan(0);
    expect(limits.keylessWait('198.51.100.2')).toBe(0);
    // An IPv6 address is charged with its /64.
    limits.chargeKeylessWork('2001:db8::1', 2_000);
    expect(limits.keylessWait('2001:db8::ffff')).toBeGreaterThan(0);
    time.advance(60_000);
    expect(limits.keylessWait('198.51.100.1')).toBe(0);
  });

  it('refuses every address once all of them together passed KEYLESS_TOTAL_WORK_MS_PER_MINUTE', () => {
    const limits = limitsWith(1_000, 3_000, clock().now);
    for (let n = 1; n <= 3; n += 1) limits.chargeKeylessWork(`198.51.100.${n}`, 900);
    expect(limits.keylessWait('198.51.100.1')).toBe(0);
    limits.chargeKeylessWork('198.51.100.4', 900);
    expect(limits.keylessWait('203.0.113.9')).toBeGreaterThan(0);
  });

  it('holds a key nobody has judged yet to its own address only: never to the total, and never charged to it', () => {
    const limits = limitsWith(1_000, 3_000, clock().now);
    for (let n = 1; n <= 4; n += 1) limits.chargeKeylessWork(`198.51.100.${n}`, 900);
    // The total is spent: a keyless caller from a fresh address waits, a first try of a key from it does not.
    expect(limits.keylessWait('203.0.113.9')).toBeGreaterThan(0);
    expect(limits.keylessWait('203.0.113.9', 'trying')).toBe(0);
    // Its own address's budget still holds it.
    expect(limits.keylessWait('198.51.100.1', 'trying')).toBe(0);
    limits.chargeKeylessWork('198.51.100.1', 200, 'trying');
    expect(limits.keylessWait('198.51.100.1', 'trying')).toBeGreaterThan(0);
    // What such a key cost went to its address alone: a second process-wide spend is not charged by it.
    const fresh = limitsWith(1_000, 1_000, clock().now);
    for (let n = 1; n <= 5; n += 1) fresh.chargeKeylessWork(`192.0.2.${n}`, 900, 'trying');
    expect(fresh.keylessWait('203.0.113.9')).toBe(0);
  });

  it('counts a byte read or answered at 1/65,536 of a unit', () => {
    expect(keylessWorkUnits(2.5, 128 * 1024)).toBe(4.5);
  });
});

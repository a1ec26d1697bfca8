// ReadAccess without a server: owner records decide before the upstream, both
// ways; only a uid with no record is asked, within a subscription's allowance
// (its own count per minute and the key's rate-limit budget); what is withheld
// is counted, and logged once per allowance.
import { describe, expect, it } from 'vitest';
import { hashKey } from '../../src/domain/merchant-key.js';
import { NotFoundError } from '../../src/errors.js';
import { createLogger } from '../../src/logger.js';
import { ownerVerdict } from '../../src/access/owners.js';
import { ReadAccess, type KeyBudget } from '../../src/realtime/access.js';
import type { Store } from '../../src/store/store.js';
import type { Upstream } from '../../src/upstream/clients.js';

const MINE = 'sk_test_mine';
const THEIRS = 'sk_test_theirs';

/** A store of owner records only, and an upstream where `MINE` may read the uids of `readable` (partner group). */
function setup(options: { owners?: Record<string, string>; readable?: string[]; checksPerSubscription?: number } = {}) {
  const owners = new Map(Object.entries(options.owners ?? {}).map(([uid, key]) => [uid, hashKey(key)]));
  const store = {
    ownersOf: async (uids: string[]) => new Map(uids.filter((uid) => owners.has(uid)).map((uid) => [uid, { owner: owners.get(uid)!, group: null }])),
    recordOwners: async (records: Array<{ uid: string; owner: string }>) => records.forEach(({ uid, owner }) => owners.set(uid, owners.get(uid) ?? owner)),
  } as unknown as Store;
  const asked: string[] = [];
  const read = (group: string) => async (key: string, uid: string) => {
    asked.push(`${group} ${uid}`);
    if (group === 'partner' && key === MINE && options.readable?.includes(uid)) return {};
    throw new NotFoundError();
  };
  const upstream = { platform: { get: read('platform') }, partner: { getOrder: read('partner') } } as unknown as Upstream;
  const lines: Array<Record<string, unknown>> = [];
  const logger = createLogger('info', { write: (line: string) => void lines.push(JSON.parse(line)) });
  const access = new ReadAccess(store, upstream, { checksPerSubscription: options.checksPerSubscription, logger });
  return { access, asked, lines };
}

describe('ownerVerdict', () => {
  it('allows the recorded key, denies any other, and leaves a uid with no record to the upstream', () => {
    expect(ownerVerdict({ owner: hashKey(MINE), group: null }, hashKey(MINE))).toBe('own');
    expect(ownerVerdict({ owner: hashKey(THEIRS), group: 'PARTNER' }, hashKey(MINE))).toBe('other');
    expect(ownerVerdict(undefined, hashKey(MINE))).toBe('unknown');
  });
});

describe('ReadAccess.canRead', () => {
  it('answers from owner records without asking the upstream, and spends nothing of an allowance on them', async () => {
    const { access, asked } = setup({ owners: { mine: MINE, theirs: THEIRS } });
    const allowance = access.allowance(MINE, undefined, true);
    expect(await access.canRead(MINE, 'mine', allowance)).toBe(true);
    expect(await access.canRead(MINE, 'theirs', allowance)).toBe(false);
    expect(await access.canRead(THEIRS, 'mine')).toBe(false);
    expect(asked).toEqual([]);
    expect(access.counters.checks).toEqual({ allowed: 0, denied: 0, failed: 0 });
  });

  it('asks the upstream about a uid with no record, platform then partner, and records the key it allowed as the owner', async () => {
    const { access, asked } = setup({ readable: ['order'] });
    expect(await access.canRead(THEIRS, 'order')).toBe(false);
    expect(await access.canRead(MINE, 'order')).toBe(true);
    expect(await access.canRead(MINE, 'order')).toBe(true);
    expect(asked).toEqual(['platform order', 'partner order', 'platform order', 'partner order']);
    // From the record: any other key is denied without asking.
    expect(await access.canRead('sk_test_third', 'order')).toBe(false);
    expect(asked).toHaveLength(4);
    expect(access.counters.checks).toEqual({ allowed: 1, denied: 1, failed: 0 });
  });

  it('records no owner from a check an unfiltered deliveryEvents made for an event passing by; a uid the client named is recorded', async () => {
    const { access, asked } = setup({ readable: ['passing', 'named'] });
    expect(await access.canRead(MINE, 'passing', access.allowance(MINE, undefined, true))).toBe(true);
    // Not the key's delivery by record: another key is still the upstream's to answer.
    expect(await access.canRead(THEIRS, 'passing')).toBe(false);
    expect(asked.filter((entry) => entry.endsWith('passing'))).toEqual(['platform passing', 'partner passing', 'platform passing', 'partner passing']);
    expect(await access.canRead(MINE, 'named', access.allowance(MINE, undefined, false))).toBe(true);
    await new Promise((resolve) => setTimeout(resolve, 100));
    expect(await access.canRead(THEIRS, 'named')).toBe(false);
    // Denied from the record: not asked.
    expect(asked.filter((entry) => entry.endsWith('named'))).toEqual(['platform named', 'partner named']);
  });

  it('makes at most SUBSCRIPTION_ACCESS_CHECKS upstream checks for one subscription, then withholds them, counted and logged once', async () => {
    const { access, asked, lines } = setup({ readable: ['a', 'b', 'c', 'd'], checksPerSubscription: 2 });
    const allowance = access.allowance(MINE, undefined, true);
    const answers = [];
    for (const uid of ['a', 'b', 'c', 'd']) answers.push(await access.canRead(MINE, uid, allowance));
    expect(answers.slice(0, 2)).toEqual([true, true]);
    expect(answers.slice(2)).toEqual([
      { reason: 'subscription', retryAfterSeconds: expect.any(Number) },
      { reason: 'subscription', retryAfterSeconds: expect.any(Number) },
    ]);
    expect(asked.filter((call) => call.startsWith('partner'))).toEqual(['partner a', 'partner b']);
    expect(access.counters.withheld).toEqual({ subscription: 2, rate_limit: 0 });
    expect(lines.filter((line) => line.reason === 'subscription')).toHaveLength(1);
    // Another subscription has its own count; the uids the client names have none.
    expect(await access.canRead(MINE, 'c', access.allowance(MINE, undefined, true))).toBe(true);
    expect(await access.canRead(MINE, 'd', access.allowance(MINE, undefined, false))).toBe(true);
  });

  it('takes one unit of the key’s budget per upstream check, and asks the budget no more while it is spent', async () => {
    const { access, asked } = setup({ readable: ['a', 'b', 'c'] });
    const takes: string[] = [];
    const budget: KeyBudget = { take: (key) => (takes.push(key), takes.length === 1 ? 0 : 7) };
    const allowance = access.allowance(MINE, budget, false);
    expect(await access.canRead(MINE, 'a', allowance)).toBe(true);
    expect(await access.canRead(MINE, 'b', allowance)).toEqual({ reason: 'rate_limit', retryAfterSeconds: 7 });
    expect(await access.canRead(MINE, 'c', allowance)).toEqual({ reason: 'rate_limit', retryAfterSeconds: expect.any(Number) });
    expect(takes).toEqual([MINE, MINE]);
    expect(asked).toEqual(['platform a', 'partner a']);
    expect(access.counters.withheld.rate_limit).toBe(2);
  });
});

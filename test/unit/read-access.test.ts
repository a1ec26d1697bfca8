// ReadAccess without a server. Owner records decide before the upstream: the
// caller's own for free, another merchant's for free only when it passes an
// unfiltered feed; a uid the client named that is another merchant's costs
// exactly what an unknown uid costs. What decides a uid with no record depends
// on the upstream's read scope: on a key-scoped one its reads (platform, then
// partner; the key it allowed is recorded), on a platform-scoped one only a
// partner order's read by reference. Checks are made within a subscription's
// allowance (its own count per minute and the key's rate-limit budget); what
// is withheld is counted, and logged once per allowance.
import { describe, expect, it } from 'vitest';
import type { ReadScope } from '../../src/config.js';
import { hashKey } from '../../src/domain/merchant-key.js';
import { NotFoundError } from '../../src/errors.js';
import { createLogger } from '../../src/logger.js';
import { ownerVerdict, Owners } from '../../src/access/owners.js';
import { ReadAccess, type KeyBudget } from '../../src/realtime/access.js';
import { supersedes, type OwnerEntry, type OwnerRecord, type Store } from '../../src/store/store.js';
import type { Upstream } from '../../src/upstream/clients.js';

const MINE = 'sk_test_mine';
const THEIRS = 'sk_test_theirs';

interface Setup {
  /** uid → [key, proof] of its owner record. */
  owners?: Record<string, [string, OwnerRecord['proof']]>;
  /** Partner orders `MINE` owns: readable by uid by anyone on a platform-scoped upstream, by reference by MINE only. */
  readable?: string[];
  checksPerSubscription?: number;
  scope?: ReadScope;
}

/** A store of owner records only, and an upstream where `MINE` owns the partner orders of `readable`. */
function setup(options: Setup = {}) {
  const scope = options.scope ?? 'key';
  const records = new Map<string, OwnerRecord>(
    Object.entries(options.owners ?? {}).map(([uid, [key, proof]]) => [
      uid,
      { owner: hashKey(key), group: null, proof },
    ]),
  );
  const store = {
    ownersOf: async (uids: string[]) =>
      new Map(uids.filter((uid) => records.has(uid)).map((uid) => [uid, records.get(uid)!])),
    // The stores' rule: the first stays, but for a merchant-scoped proof over a read.
    recordOwners: async (entries: OwnerEntry[]) =>
      entries.forEach(
        (entry) =>
          supersedes(entry, records.get(entry.uid)) &&
          records.set(entry.uid, { owner: entry.owner, group: entry.group, proof: entry.proof ?? 'read' }),
      ),
    merchantLinks: async () => new Map(),
  } as unknown as Store;
  const asked: string[] = [];
  // Any uid drawn by the facade (a read as an unknown uid, src/access/prove.ts) is recorded as "drawn".
  const named = (uid: string) =>
    uid.length === 36 && !options.readable?.includes(uid) && !records.has(uid) ? 'drawn' : uid;
  const read = (group: string) => async (key: string, uid: string) => {
    asked.push(`${group} ${named(uid)}`);
    const mine = group === 'partner' && options.readable?.includes(uid);
    if (mine && (scope === 'platform' || key === MINE)) return { uid, partner_reference: `ref-${uid}` };
    throw new NotFoundError();
  };
  const byReference = async (key: string, reference: string) => {
    asked.push(`reference ${reference}`);
    const uid = reference.slice('ref-'.length);
    if (key === MINE && options.readable?.includes(uid)) return { uid, partner_reference: reference };
    throw new NotFoundError();
  };
  const upstream = {
    platform: { get: read('platform') },
    partner: { getOrder: read('partner'), getOrderByReference: byReference },
  } as unknown as Upstream;
  const lines: Array<Record<string, unknown>> = [];
  const logger = createLogger('info', { write: (line: string) => void lines.push(JSON.parse(line)) });
  const owners = new Owners(store, { readScope: scope });
  const access = new ReadAccess(store, upstream, {
    checksPerSubscription: options.checksPerSubscription,
    logger,
    owners,
  });
  return { access, asked, lines, records };
}

const flushed = () => new Promise((resolve) => setTimeout(resolve, 100));

describe('ownerVerdict', () => {
  it("allows the owner's merchant, denies another merchant's proof, and leaves the rest to the upstream or a proof", () => {
    const mine = hashKey(MINE);
    const theirs = hashKey(THEIRS);
    expect(ownerVerdict({ owner: mine, group: null, proof: null }, undefined, mine, 'platform')).toBe('own');
    // A key of the caller's merchant from before a link: its records are the merchant's.
    expect(ownerVerdict({ owner: theirs, group: null, proof: 'read' }, mine, mine, 'platform')).toBe('own');
    expect(ownerVerdict({ owner: theirs, group: 'PARTNER', proof: 'booked' }, undefined, mine, 'platform')).toBe(
      'other',
    );
    expect(ownerVerdict({ owner: theirs, group: 'PARTNER', proof: 'reference' }, undefined, mine, 'platform')).toBe(
      'other',
    );
    // A platform-scoped 200 proved nothing: another merchant may still prove it its own.
    expect(ownerVerdict({ owner: theirs, group: 'PARTNER', proof: 'read' }, undefined, mine, 'platform')).toBe(
      'unknown',
    );
    expect(ownerVerdict({ owner: theirs, group: 'PARTNER', proof: null }, undefined, mine, 'platform')).toBe('unknown');
    // A key-scoped upstream said it: another merchant's.
    expect(ownerVerdict({ owner: theirs, group: 'PARTNER', proof: 'read' }, undefined, mine, 'key')).toBe('other');
    expect(ownerVerdict(undefined, undefined, mine, 'key')).toBe('unknown');
  });
});

describe('ReadAccess.canRead on a key-scoped upstream', () => {
  it("answers the caller's own records and another merchant's met in passing without the upstream; a named one of another merchant's costs what an unknown uid costs", async () => {
    const { access, asked } = setup({ owners: { mine: [MINE, 'booked'], theirs: [THEIRS, 'booked'] } });
    const passing = access.allowance(MINE, undefined, true);
    expect(await access.canRead(MINE, 'mine', passing)).toBe(true);
    expect(await access.canRead(MINE, 'theirs', passing)).toBe(false);
    expect(asked).toEqual([]);
    expect(access.counters.checks).toEqual({ allowed: 0, denied: 0, failed: 0 });
    // Named by the client: read with its key as an unknown uid would be, and the upstream says no.
    expect(await access.canRead(THEIRS, 'mine')).toBe(false);
    expect(await access.canRead(THEIRS, 'nowhere')).toBe(false);
    expect(asked).toEqual(['platform mine', 'partner mine', 'platform nowhere', 'partner nowhere']);
  });

  it('asks the upstream about a uid with no record, platform then partner, and records the merchant it allowed as the owner', async () => {
    const { access, asked, records } = setup({ readable: ['order'] });
    expect(await access.canRead(THEIRS, 'order')).toBe(false);
    expect(await access.canRead(MINE, 'order')).toBe(true);
    expect(await access.canRead(MINE, 'order')).toBe(true);
    expect(asked).toEqual(['platform order', 'partner order', 'platform order', 'partner order']);
    await flushed();
    expect(records.get('order')).toEqual({ owner: hashKey(MINE), group: 'PARTNER', proof: 'read' });
    expect(access.counters.checks).toEqual({ allowed: 1, denied: 1, failed: 0 });
  });

  it('records no owner from a check an unfiltered deliveryEvents made for an event passing by; a uid the client named is recorded', async () => {
    const { access, asked, records } = setup({ readable: ['passing', 'named'] });
    expect(await access.canRead(MINE, 'passing', access.allowance(MINE, undefined, true))).toBe(true);
    expect(await access.canRead(MINE, 'named', access.allowance(MINE, undefined, false))).toBe(true);
    await flushed();
    expect(records.has('passing')).toBe(false);
    expect(records.get('named')?.owner).toBe(hashKey(MINE));
    expect(asked).toEqual(['platform passing', 'partner passing', 'platform named', 'partner named']);
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
    expect(await access.canRead(MINE, 'c', allowance)).toEqual({
      reason: 'rate_limit',
      retryAfterSeconds: expect.any(Number),
    });
    expect(takes).toEqual([MINE, MINE]);
    expect(asked).toEqual(['platform a', 'partner a']);
    expect(access.counters.withheld.rate_limit).toBe(2);
  });
});

describe('ReadAccess.canRead on a platform-scoped upstream', () => {
  it("proves a partner order by the caller's read by reference, records that proof, and lets nobody else in on the read by uid", async () => {
    const { access, asked, records } = setup({ scope: 'platform', readable: ['order'] });
    // The other merchant reads the order by uid (a 200 that proves nothing); its reference read finds none of its own.
    expect(await access.canRead(THEIRS, 'order')).toBe(false);
    expect(await access.canRead(MINE, 'order')).toBe(true);
    // The platform group is not asked: nothing read there proves anything.
    expect(asked).toEqual(['partner order', 'reference ref-order', 'partner order', 'reference ref-order']);
    await flushed();
    expect(records.get('order')).toEqual({ owner: hashKey(MINE), group: 'PARTNER', proof: 'reference' });
  });

  it("replaces another merchant's record learned from a read with the owner's proof", async () => {
    const { access, records } = setup({ scope: 'platform', readable: ['order'], owners: { order: [THEIRS, 'read'] } });
    // The record from a read (here: from before proofs were kept) still serves the key it names...
    expect(await access.canRead(THEIRS, 'order')).toBe(true);
    // ...but does not lock out the merchant who proves the order its own.
    expect(await access.canRead(MINE, 'order')).toBe(true);
    await flushed();
    expect(records.get('order')).toEqual({ owner: hashKey(MINE), group: 'PARTNER', proof: 'reference' });
  });

  it("reads another merchant's proven uid as a uid drawn now, which exists nowhere: one call, as for an unknown uid", async () => {
    const { access, asked } = setup({ scope: 'platform', owners: { theirs: [THEIRS, 'booked'] } });
    expect(await access.canRead(MINE, 'theirs')).toBe(false);
    expect(await access.canRead(MINE, 'nowhere')).toBe(false);
    expect(asked).toEqual(['partner drawn', 'partner nowhere']);
  });
});

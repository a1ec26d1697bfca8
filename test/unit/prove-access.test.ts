// proveAccess without a server: the one path that proves or refuses a caller's
// claim to a delivery, against owner records in memory and an upstream that
// counts what it is asked. For each purpose (read, check, pass, cancel): what the
// owner record settles without the upstream, what is read (and as what: another
// merchant's uid as an unknown one), what proves the rest on each read scope, and
// what is recorded. The answer says whether the upstream was read and carries
// the delivery when it was, so no caller reads twice.
import { describe, expect, it } from 'vitest';
import type { ReadScope } from '../../src/config.js';
import { hashKey } from '../../src/domain/merchant-key.js';
import { NotFoundError } from '../../src/errors.js';
import { Owners } from '../../src/access/owners.js';
import { proveAccess, recordProof, standIn, type AccessClaim } from '../../src/access/prove.js';
import { supersedes, type OwnerEntry, type OwnerRecord, type Store } from '../../src/store/store.js';
import type { Upstream } from '../../src/upstream/clients.js';

const MINE = 'sk_test_mine';
const THEIRS = 'sk_test_theirs';
const mine = hashKey(MINE);

interface World {
  scope: ReadScope;
  /** uid → [owner key, group, proof] of its owner record. */
  records?: Record<string, [string, OwnerRecord['group'], OwnerRecord['proof']]>;
  /** uid → [group, the key of the merchant that has it] at the upstream. */
  deliveries?: Record<string, ['PLATFORM' | 'PARTNER', string]>;
}

/**
 * Owner records in memory (written by the stores' rule) and an upstream that reads by uid as its scope says (platform:
 * any key; key: the owner's only), and by partner reference for the owner's key only.
 */
function world({ scope, records: given = {}, deliveries = {} }: World) {
  const records = new Map<string, OwnerRecord>(
    Object.entries(given).map(([uid, [key, group, proof]]) => [uid, { owner: hashKey(key), group, proof }]),
  );
  const writes: OwnerEntry[] = [];
  const store = {
    ownersOf: async (uids: string[]) =>
      new Map(uids.filter((uid) => records.has(uid)).map((uid) => [uid, records.get(uid)!])),
    recordOwners: async (entries: OwnerEntry[]) => {
      writes.push(...entries);
      for (const entry of entries)
        if (supersedes(entry, records.get(entry.uid)) || records.get(entry.uid)?.owner === entry.owner)
          records.set(entry.uid, { owner: entry.owner, group: entry.group, proof: entry.proof ?? 'read' });
    },
    merchantLinks: async () => new Map(),
    ownerClaimsAfter: async () => ({ version: 0, uids: [] }),
  } as unknown as Store;
  const asked: string[] = [];
  const named = (uid: string) => (deliveries[uid] || records.has(uid) ? uid : 'nowhere');
  const read = (group: 'PLATFORM' | 'PARTNER') => async (key: string, uid: string) => {
    asked.push(`${group} ${named(uid)}`);
    const found = deliveries[uid];
    if (found?.[0] === group && (scope === 'platform' || found[1] === key))
      return { uid, status: 'Created', partner_reference: group === 'PARTNER' ? `ref-${uid}` : undefined };
    const error = new NotFoundError();
    error.upstream = { status: 404, code: 'not_found', message: `No delivery ${uid}.` } as never;
    throw error;
  };
  const upstream = {
    platform: { get: read('PLATFORM') },
    partner: {
      getOrder: read('PARTNER'),
      getOrderByReference: async (key: string, reference: string) => {
        asked.push(`reference ${reference}`);
        const uid = reference.slice('ref-'.length);
        if (deliveries[uid]?.[1] === key) return { uid, partner_reference: reference };
        throw new NotFoundError();
      },
    },
  } as unknown as Upstream;
  const owners = new Owners(store, { readScope: scope, proofRefreshMs: 0 });
  const prove = (claim: Omit<AccessClaim, 'merchant'> & { merchant?: string }, mayAsk?: () => boolean) =>
    proveAccess(owners, upstream, { merchant: hashKey(claim.key), ...claim } as AccessClaim, { mayAsk });
  return { prove, owners, asked, records, writes };
}

const flushed = () => new Promise((resolve) => setTimeout(resolve, 100));

describe('proveAccess: the caller’s own record', () => {
  it('proves a check with no upstream call, and reads once for a read (the delivery comes with the answer)', async () => {
    const { prove, asked } = world({
      scope: 'platform',
      records: { a: [MINE, 'PLATFORM', 'booked'] },
      deliveries: { a: ['PLATFORM', MINE] },
    });
    expect(await prove({ key: MINE, uid: 'a', purpose: 'check' })).toMatchObject({
      allowed: true,
      provedBy: 'record',
      group: 'PLATFORM',
      upstreamRead: false,
      delivery: undefined,
    });
    expect(await prove({ key: MINE, uid: 'a', purpose: 'cancel', group: 'PLATFORM' })).toMatchObject({
      allowed: true,
      upstreamRead: false,
    });
    expect(asked).toEqual([]);
    const read = await prove({ key: MINE, uid: 'a', purpose: 'read', group: 'PLATFORM' });
    expect(read).toMatchObject({ allowed: true, provedBy: 'record', upstreamRead: true, delivery: { uid: 'a' } });
    expect(asked).toEqual(['PLATFORM a']);
  });

  it('refuses it in the other group unasked, naming where it is', async () => {
    const { prove, asked } = world({ scope: 'key', records: { a: [MINE, 'PARTNER', 'reference'] } });
    for (const purpose of ['read', 'cancel'] as const)
      expect(await prove({ key: MINE, uid: 'a', purpose, group: 'PLATFORM' })).toMatchObject({
        allowed: false,
        elsewhere: 'PARTNER',
        upstreamRead: false,
      });
    expect(asked).toEqual([]);
  });

  it('is proved again by a key-scoped read and by a cancel the upstream made: the record is written again', async () => {
    const { prove, owners, writes } = world({
      scope: 'key',
      records: { a: [MINE, 'PLATFORM', 'booked'] },
      deliveries: { a: ['PLATFORM', MINE] },
    });
    await prove({ key: MINE, uid: 'a', purpose: 'read', group: 'PLATFORM' });
    await flushed();
    expect(writes).toEqual([{ uid: 'a', owner: mine, group: 'PLATFORM', proof: 'booked' }]);
    recordProof(owners, mine, 'a', 'PLATFORM', 'canceled');
    await flushed();
    expect(writes).toHaveLength(2);
  });
});

describe('proveAccess: another merchant’s record', () => {
  it('reads it as an unknown uid on a platform-scoped upstream: a stand-in, refused with the words of the uid named', async () => {
    const { prove, asked } = world({
      scope: 'platform',
      records: { theirs: [THEIRS, 'PARTNER', 'booked'] },
      deliveries: { theirs: ['PARTNER', THEIRS] },
    });
    const answer = await prove({ key: MINE, uid: 'theirs', purpose: 'read', group: 'PARTNER' });
    expect(answer).toMatchObject({ allowed: false, upstreamRead: true, withheld: false });
    expect(answer.allowed || answer.notFound?.upstream?.message).toBe('No delivery theirs.');
    expect(asked).toEqual(['PARTNER nowhere']);
    // An unknown uid costs the same.
    const unknown = await prove({ key: MINE, uid: 'gone', purpose: 'read', group: 'PARTNER' });
    expect(unknown).toMatchObject({ allowed: false, upstreamRead: true });
    expect(asked).toEqual(['PARTNER nowhere', 'PARTNER nowhere']);
    expect(standIn('theirs')).toBe(standIn('theirs'));
    expect(standIn('theirs')).toMatch(/^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/);
  });

  it('refuses it unasked when it merely passes an unfiltered feed, without spending the budget', async () => {
    const { prove, asked } = world({ scope: 'key', records: { theirs: [THEIRS, 'PLATFORM', 'booked'] } });
    let budget = 0;
    const answer = await prove({ key: MINE, uid: 'theirs', purpose: 'pass' }, () => (budget += 1) > 0);
    expect(answer).toMatchObject({ allowed: false, upstreamRead: false, withheld: false });
    expect([asked, budget]).toEqual([[], 0]);
  });
});

describe('proveAccess: no record that decides', () => {
  it('on a platform-scoped upstream, proves a partner order by its reference (recorded) and nothing else', async () => {
    const { prove, asked, records } = world({
      scope: 'platform',
      deliveries: { order: ['PARTNER', MINE], booked: ['PLATFORM', MINE] },
      // Learned from a read: another merchant's proof still wins over it.
      records: { order: [THEIRS, 'PARTNER', 'read'] },
    });
    expect(await prove({ key: MINE, uid: 'order', purpose: 'check' })).toMatchObject({
      allowed: true,
      provedBy: 'reference',
      group: 'PARTNER',
      upstreamRead: true,
      delivery: { uid: 'order' },
    });
    // A platform delivery read by uid proves nothing, for its owner too; a check does not even ask the platform group.
    expect(await prove({ key: MINE, uid: 'booked', purpose: 'read', group: 'PLATFORM' })).toMatchObject({
      allowed: false,
    });
    expect(await prove({ key: MINE, uid: 'booked', purpose: 'check' })).toMatchObject({ allowed: false });
    expect(asked).toEqual(['PARTNER order', 'reference ref-order', 'PLATFORM booked', 'PARTNER booked']);
    await flushed();
    expect(records.get('order')).toEqual({ owner: mine, group: 'PARTNER', proof: 'reference' });
  });

  it('on a platform-scoped upstream, leaves a found delivery’s cancel to the upstream (no reference read)', async () => {
    const { prove, asked } = world({ scope: 'platform', deliveries: { booked: ['PLATFORM', MINE] } });
    expect(await prove({ key: MINE, uid: 'booked', purpose: 'cancel', group: 'PLATFORM' })).toMatchObject({
      allowed: true,
      provedBy: 'found',
    });
    expect(asked).toEqual(['PLATFORM booked']);
  });

  it('on a key-scoped upstream, takes the read’s 200 as proof and records it, unless the check merely passed by', async () => {
    const { prove, records, asked } = world({
      scope: 'key',
      deliveries: { named: ['PARTNER', MINE], passing: ['PARTNER', MINE], canceled: ['PLATFORM', MINE] },
    });
    expect(await prove({ key: MINE, uid: 'named', purpose: 'check' })).toMatchObject({
      allowed: true,
      provedBy: 'read',
      group: 'PARTNER',
    });
    expect(await prove({ key: MINE, uid: 'passing', purpose: 'pass' })).toMatchObject({ allowed: true });
    expect(await prove({ key: MINE, uid: 'canceled', purpose: 'cancel', group: 'PLATFORM' })).toMatchObject({
      allowed: true,
      provedBy: 'read',
    });
    expect(asked).toEqual([
      'PLATFORM named',
      'PARTNER named',
      'PLATFORM passing',
      'PARTNER passing',
      'PLATFORM canceled',
    ]);
    await flushed();
    expect(records.get('named')).toEqual({ owner: mine, group: 'PARTNER', proof: 'read' });
    expect(records.has('passing')).toBe(false);
    // Read before a cancel: recorded whatever the cancel then says.
    expect(records.get('canceled')).toEqual({ owner: mine, group: 'PLATFORM', proof: 'read' });
  });

  it('refuses a cancel not found in its group, naming the other group where the caller’s merchant has it', async () => {
    const { prove, asked, records } = world({ scope: 'key', deliveries: { order: ['PARTNER', MINE] } });
    const answer = await prove({ key: MINE, uid: 'order', purpose: 'cancel', group: 'PLATFORM' });
    expect(answer).toMatchObject({ allowed: false, elsewhere: 'PARTNER', upstreamRead: true });
    expect(answer.allowed || answer.notFound?.upstream?.message).toBe('No delivery order.');
    expect(asked).toEqual(['PLATFORM order', 'PARTNER order']);
    // Another merchant is told nothing of it.
    expect(await prove({ key: THEIRS, uid: 'order', purpose: 'cancel', group: 'PLATFORM' })).toMatchObject({
      allowed: false,
      elsewhere: undefined,
    });
    await flushed();
    expect(records.get('order')).toEqual({ owner: mine, group: 'PARTNER', proof: 'read' });
  });

  it('asks nothing when the caller’s budget says no', async () => {
    const { prove, asked } = world({ scope: 'key', deliveries: { a: ['PLATFORM', MINE] } });
    expect(await prove({ key: MINE, uid: 'a', purpose: 'check' }, () => false)).toMatchObject({
      allowed: false,
      withheld: true,
      upstreamRead: false,
    });
    expect(asked).toEqual([]);
  });
});

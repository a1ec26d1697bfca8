// Owners.recordBooking without a server: a store that refuses writes leaves the
// booking in memory (bounded in bytes), where lookups and a retry of its
// idempotency key find it; only the writes that failed are tried again, and a
// booking past the bound is logged, not kept.
import { describe, expect, it } from 'vitest';
import { Owners, type BookingRecord } from '../../src/access/owners.js';
import { createLogger } from '../../src/logger.js';
import type { BookingResult, OwnerEntry, OwnerRecord, Store } from '../../src/store/store.js';

/** Owner records and completed claims in maps; `refuse` says which writes fail, as on a full disk. */
function setup(unrecordedBytes?: number) {
  const owners = new Map<string, OwnerRecord>();
  const claims = new Map<string, BookingResult>();
  const refuse = { owners: false, claims: false };
  const writes = { owners: 0, claims: 0 };
  const full = () => Object.assign(new Error('database or disk is full'), { code: 'SQLITE_FULL' });
  const store = {
    ownersOf: async (uids: string[]) =>
      new Map(uids.filter((uid) => owners.has(uid)).map((uid) => [uid, owners.get(uid)!])),
    recordOwner: async (uid: string, owner: string, group: OwnerRecord['group'], proof?: OwnerRecord['proof']) =>
      store.recordOwners([{ uid, owner, group, proof }]),
    recordOwners: async (records: OwnerEntry[]) => {
      writes.owners += records.length;
      if (refuse.owners) throw full();
      for (const { uid, owner, group, proof } of records)
        if (!owners.has(uid)) owners.set(uid, { owner, group, proof: proof ?? 'read' });
    },
    completeIdempotency: async (owner: string, idempotencyKey: string, result: BookingResult) => {
      writes.claims += 1;
      if (refuse.claims) throw full();
      claims.set(`${owner}:${idempotencyKey}`, result);
    },
  } as unknown as Store;
  const lines: Array<{ msg: string; uid?: string; level: number }> = [];
  const logger = createLogger('info', { write: (line: string) => void lines.push(JSON.parse(line)) });
  return { recorder: new Owners(store, { logger, unrecordedBytes }), owners, claims, refuse, writes, lines };
}

const booking = (uid: string, claim?: string): BookingRecord => ({
  result: { uid, trackingUrl: `https://track.example/${uid}` },
  owner: 'owner-hash',
  group: 'PLATFORM',
  claim: claim ? { idempotencyKey: claim, fingerprint: 'fp' } : undefined,
});

describe('Owners.recordBooking', () => {
  it('writes both records when the store writes, and keeps nothing in memory', async () => {
    const { recorder, owners, claims } = setup();
    await recorder.recordBooking(booking('d1', 'k1'));
    expect(owners.get('d1')).toEqual({ owner: 'owner-hash', group: 'PLATFORM', proof: 'booked' });
    expect(claims.get('owner-hash:k1')).toEqual({ uid: 'd1', trackingUrl: 'https://track.example/d1' });
    expect(recorder.unrecorded.bookings).toBe(0);
    expect(recorder.unrecordedClaim('owner-hash', 'k1')).toBeUndefined();
  });

  it('keeps a refused booking in memory for lookups and its key, then writes only what failed', async () => {
    const { recorder, owners, claims, refuse, writes, lines } = setup();
    refuse.claims = true;
    await recorder.recordBooking(booking('d1', 'k1'));
    // The owner record was written; the claim waits.
    expect(owners.has('d1')).toBe(true);
    expect(recorder.unrecordedClaim('owner-hash', 'k1')).toEqual({
      result: { uid: 'd1', trackingUrl: 'https://track.example/d1' },
      fingerprint: 'fp',
    });
    expect(lines.filter((line) => line.uid === 'd1')).toHaveLength(1);

    refuse.owners = true;
    await recorder.recordBooking(booking('d2'));
    expect(await recorder.lookupOne('d2')).toEqual({ owner: 'owner-hash', group: 'PLATFORM', proof: 'booked' });
    expect(owners.has('d2')).toBe(false);
    expect(recorder.unrecorded.bookings).toBe(2);

    // Still refused at a flush: nothing lost, nothing logged again per booking.
    await recorder.flush();
    expect(recorder.unrecorded.bookings).toBe(2);
    expect(lines.filter((line) => line.uid === 'd1' || line.uid === 'd2')).toHaveLength(2);

    refuse.owners = false;
    refuse.claims = false;
    const before = { ...writes };
    await recorder.flush();
    expect(recorder.unrecorded.bookings).toBe(0);
    expect(owners.get('d2')).toEqual({ owner: 'owner-hash', group: 'PLATFORM', proof: 'booked' });
    expect(claims.get('owner-hash:k1')?.uid).toBe('d1');
    // d1's owner record was not written again; d2 had no claim.
    expect({ owners: writes.owners - before.owners, claims: writes.claims - before.claims }).toEqual({
      owners: 1,
      claims: 1,
    });
    expect(recorder.unrecordedClaim('owner-hash', 'k1')).toBeUndefined();
    // Known from memory still, now as a written record.
    expect(await recorder.lookupOne('d1')).toEqual({ owner: 'owner-hash', group: 'PLATFORM', proof: 'booked' });
  });

  it('the next booking the store takes brings the waiting ones with it', async () => {
    const { recorder, owners, refuse } = setup();
    refuse.owners = true;
    await recorder.recordBooking(booking('d1'));
    refuse.owners = false;
    await recorder.recordBooking(booking('d2'));
    await new Promise((resolve) => setImmediate(resolve));
    expect(owners.has('d1')).toBe(true);
    expect(recorder.unrecorded.bookings).toBe(0);
  });

  it('keeps no more than its bound: a booking past it is logged with its uid, not kept', async () => {
    const { recorder, refuse, lines } = setup(1_500);
    refuse.owners = true;
    for (const uid of ['d1', 'd2', 'd3', 'd4']) await recorder.recordBooking(booking(uid, `key-${uid}`));
    const { bookings, bytes } = recorder.unrecorded;
    expect(bookings).toBeGreaterThan(0);
    expect(bookings).toBeLessThan(4);
    expect(bytes).toBeLessThanOrEqual(1_500);
    const dropped = lines.filter((line) => /too many wait/.test(line.msg)).map((line) => line.uid);
    expect(dropped).toEqual(['d1', 'd2', 'd3', 'd4'].slice(bookings));
    expect(await recorder.lookupOne('d4')).toBeUndefined();
    expect(recorder.unrecordedClaim('owner-hash', 'key-d4')).toBeUndefined();
  });
});

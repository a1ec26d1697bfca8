// The owner records kept in memory (Owners' cache, bounded in bytes): once full,
// each record remembered evicts the oldest, however long the cache keeps
// learning. A lookup answered from memory does not ask the store; one evicted does.
import { describe, expect, it } from 'vitest';
import { Owners } from '../../src/access/owners.js';
import type { OwnerRecord, Store } from '../../src/store/store.js';

/** A store holding a record for every uid asked, counting the uids it was asked for. */
function setup(cacheBytes: number) {
  const asked: string[] = [];
  const store = {
    ownersOf: async (uids: string[]) => {
      asked.push(...uids);
      return new Map<string, OwnerRecord>(
        uids.map((uid) => [uid, { owner: `owner-of-${uid}`, group: 'PLATFORM', proof: null }]),
      );
    },
  } as unknown as Store;
  return { owners: new Owners(store, { cacheBytes }), asked };
}

// Five-character uids: 160 bytes of overhead and 10 of text each (src/access/owners.ts), so ten fit in 1,700 bytes.
const uid = (n: number) => `d${String(n).padStart(4, '0')}`;
const TEN = 1_700;

describe('the owner cache', () => {
  it('keeps the newest records up to its bound and evicts the oldest first', async () => {
    const { owners, asked } = setup(TEN);
    for (let n = 1; n <= 30; n += 1) await owners.lookupOne(uid(n));
    expect(owners.cached).toEqual({ entries: 10, bytes: 1_700 });
    asked.length = 0;
    // The newest ten from memory, with their records.
    for (let n = 21; n <= 30; n += 1)
      expect(await owners.lookupOne(uid(n))).toEqual({ owner: `owner-of-${uid(n)}`, group: 'PLATFORM', proof: null });
    expect(asked).toEqual([]);
    // An evicted one from the store, which makes it the newest and evicts the oldest left (d0021).
    await owners.lookupOne(uid(1));
    expect(asked).toEqual([uid(1)]);
    await owners.lookupOne(uid(21));
    expect(asked).toEqual([uid(1), uid(21)]);
    expect(owners.cached.entries).toBe(10);
  });

  it('goes on evicting in order through thousands of records (the table rehashed many times under it)', async () => {
    const { owners, asked } = setup(TEN);
    for (let n = 1; n <= 5_000; n += 1) {
      await owners.lookupOne(uid(n));
      // Every few records, one still kept is read again: found in memory, it keeps its place.
      if (n % 7 === 0) await owners.lookupOne(uid(n - 3));
    }
    expect(owners.cached).toEqual({ entries: 10, bytes: 1_700 });
    asked.length = 0;
    for (let n = 4_991; n <= 5_000; n += 1) await owners.lookupOne(uid(n));
    expect(asked).toEqual([]);
    await owners.lookupOne(uid(4_990));
    expect(asked).toEqual([uid(4_990)]);
  });
});

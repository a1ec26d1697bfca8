// The embedded store answers "no owner record" for a uid nobody recorded from
// memory (src/store/uid-filter.ts), not by a query on its file: the common first
// read of a delivery. These tests show it answers from the filter (a row written
// behind the store's back is not seen until the file is opened again), that it
// never hides a record the store wrote, and that it grows with the records.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import Database from 'better-sqlite3';
import { afterEach, describe, expect, it } from 'vitest';
import { SqliteStore } from '../../src/store/sqlite.js';

const dirs: string[] = [];
const stores: SqliteStore[] = [];

function open(dir = mkdtempSync(path.join(tmpdir(), 'delivery-graph-owner-filter-'))): SqliteStore {
  if (!dirs.includes(dir)) dirs.push(dir);
  const store = new SqliteStore(dir);
  stores.push(store);
  return store;
}

async function filled(store: SqliteStore): Promise<void> {
  for (let wait = 0; !store.ownerFilter.complete; wait += 1) {
    if (wait > 500) throw new Error('the owner filter was never filled');
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
}

afterEach(async () => {
  for (const store of stores.splice(0)) await store.close();
  for (const dir of dirs.splice(0)) rmSync(dir, { recursive: true, force: true });
});

describe('the owner filter of the embedded store', () => {
  it('answers "no record" from memory, finds what the store wrote, and is filled from the file when it is opened', async () => {
    const store = open();
    await filled(store);
    await store.recordOwners([
      { uid: 'a', owner: 'hash-a', group: 'PLATFORM' },
      { uid: 'b', owner: 'hash-b', group: 'PARTNER' },
    ]);
    await store.recordOwner('c', 'hash-c', 'PLATFORM');
    // Written behind the store's back (no other process can: data-dir-lock.ts): the filter says never recorded, so the
    // file is not asked.
    store.db
      .prepare('INSERT INTO ownership (uid, owner_hash, created_at, proved_at, api_group) VALUES (?, ?, ?, ?, ?)')
      .run('behind', 'hash-x', Date.now(), Date.now(), 'PLATFORM');
    const found = await store.ownersOf(['a', 'b', 'c', 'behind', 'never']);
    expect(Object.fromEntries(found)).toEqual({
      a: { owner: 'hash-a', group: 'PLATFORM', proof: 'read' },
      b: { owner: 'hash-b', group: 'PARTNER', proof: 'read' },
      c: { owner: 'hash-c', group: 'PLATFORM', proof: 'read' },
    });

    // Opened again, the filter is read from the file: every row is found.
    const dir = path.dirname(store.db.name);
    await store.close();
    const again = open(dir);
    // Before it is filled the file answers every lookup.
    expect((await again.ownersOf(['behind'])).get('behind')).toEqual({
      owner: 'hash-x',
      group: 'PLATFORM',
      proof: null,
    });
    await filled(again);
    expect([...(await again.ownersOf(['a', 'b', 'c', 'behind', 'never'])).keys()]).toEqual(['a', 'b', 'c', 'behind']);
  });

  it('is filled from a large file a small slice per turn of the event loop, and then holds every record', async () => {
    const store = open();
    await filled(store);
    const dir = path.dirname(store.db.name);
    await store.close();
    // 50,000 records written straight into the file, as a long-running instance leaves it.
    const records = 50_000;
    const db = new Database(path.join(dir, 'delivery-graph.sqlite'));
    const insert = db.prepare(
      'INSERT INTO ownership (uid, owner_hash, created_at, proved_at, api_group) VALUES (?, ?, ?, ?, ?)',
    );
    db.transaction(() => {
      for (let index = 0; index < records; index += 1)
        insert.run(`filled-${index}`, `hash-${index % 7}`, Date.now(), Date.now(), 'PLATFORM');
    })();
    db.close();

    // Turns of the loop other work gets while the filter is filled: one between every two slices of the fill.
    const again = open(dir);
    let turns = 0;
    const count = () => {
      if (again.ownerFilter.complete) return;
      turns += 1;
      setImmediate(count);
    };
    setImmediate(count);
    await filled(again);
    // At most 5,000 records read in any one turn (it read 20,000, tens of ms of the loop at once).
    expect(turns).toBeGreaterThanOrEqual(records / 5_000);
    const uids = Array.from({ length: records }, (_, index) => `filled-${index}`);
    const found = await again.ownersOf([...uids, 'never-recorded']);
    expect(found.size).toBe(records);
    expect(found.get('filled-49999')).toEqual({ owner: `hash-${49_999 % 7}`, group: 'PLATFORM', proof: null });
  });

  it('grows past its first size as records come, and still finds every one of them', async () => {
    const store = open();
    await filled(store);
    const first = store.ownerFilter.capacity;
    const uids = Array.from({ length: first + 5_000 }, (_, index) => `uid-${index}`);
    for (let start = 0; start < uids.length; start += 10_000) {
      await store.recordOwners(
        uids.slice(start, start + 10_000).map((uid) => ({ uid, owner: 'hash', group: 'PLATFORM' as const })),
      );
    }
    await filled(store);
    // A rebuild runs once more than `first` were added; wait for the larger one.
    for (let wait = 0; store.ownerFilter.capacity === first; wait += 1) {
      if (wait > 500) throw new Error('the owner filter did not grow');
      await new Promise((resolve) => setTimeout(resolve, 10));
    }
    await filled(store);
    expect(store.ownerFilter.capacity).toBeGreaterThan(first);
    expect(store.ownerFilter.bytes).toBeLessThanOrEqual(8 * 1024 * 1024);
    const found = await store.ownersOf(uids);
    expect(found.size).toBe(uids.length);
  });

  it('keeps a record still waiting for its commit when a larger filter is filled from the file', async () => {
    const store = open();
    await filled(store);
    const first = store.ownerFilter.capacity;
    for (let start = 0; start < first; start += 10_000) {
      const batch = Array.from({ length: Math.min(10_000, first - start) }, (_, index) => ({
        uid: `uid-${start + index}`,
        owner: 'hash',
        group: 'PLATFORM' as const,
      }));
      await store.recordOwners(batch);
    }
    // Another connection holds the file's write lock: the next record waits on the writer thread, not yet in the file.
    const other = new Database(store.db.name);
    other.exec('BEGIN IMMEDIATE');
    let late: Promise<void>;
    try {
      // One more than the filter was sized for: a larger one is filled from the file meanwhile.
      late = store.recordOwner('late', 'hash-late', 'PARTNER');
      for (let wait = 0; store.ownerFilter.capacity === first || !store.ownerFilter.complete; wait += 1) {
        if (wait > 500) throw new Error('the owner filter did not grow');
        await new Promise((resolve) => setTimeout(resolve, 10));
      }
    } finally {
      other.exec('ROLLBACK');
      other.close();
    }
    await late;
    expect((await store.ownersOf(['late'])).get('late')).toEqual({
      owner: 'hash-late',
      group: 'PARTNER',
      proof: 'read',
    });
  });
});

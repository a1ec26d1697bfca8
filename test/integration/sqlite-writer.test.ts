// The SQLite store's writer thread: a commit waits on the disk there, not on the
// main thread's event loop; what arrives meanwhile goes in the next commit; and a
// thread that dies fails the writes waiting on it, and every later one, with a
// clear error (readiness says so), never leaving one hanging.
import { rmSync } from 'node:fs';
import path from 'node:path';
import Database from 'better-sqlite3';
import { afterAll, describe, expect, it } from 'vitest';
import { SqliteStore } from '../../src/store/sqlite.js';
import type { WireWebhookEvent } from '../../src/upstream/wire.js';
import { makeDataDir, startStack } from '../helpers/stack.js';

const dirs: string[] = [];
afterAll(() => {
  for (const dir of dirs) rmSync(dir, { recursive: true, force: true });
});

function openStore(): SqliteStore {
  const dir = makeDataDir();
  dirs.push(dir);
  return new SqliteStore(dir);
}

const event = (uid: string, name: string) => ({
  payload: { uid, event_name: name, status: name.slice('delivery.'.length) } as WireWebhookEvent,
  receivedAt: new Date().toISOString(),
});

/** Another connection that holds the file's write lock until release(): the store's writer waits for it. */
function holdWriteLock(store: SqliteStore): { release(): void } {
  const other = new Database(store.db.name);
  other.exec('BEGIN IMMEDIATE');
  return {
    release() {
      other.exec('ROLLBACK');
      other.close();
    },
  };
}

const turnOfTheEventLoop = () => new Promise<void>((resolve) => setImmediate(resolve));

describe('the SQLite writer thread', () => {
  it('keeps the event loop free while a write waits on the file, and commits what arrived meanwhile', async () => {
    const store = openStore();
    try {
      await store.ping();
      const lock = holdWriteLock(store);
      const settled: string[] = [];
      const first = store.appendEvents([event('d1', 'delivery.created')]).finally(() => settled.push('first'));
      // On the main thread this call would wait for the lock (busy_timeout) before returning, then fail.
      await turnOfTheEventLoop();
      expect(settled).toEqual([]);
      // These queue behind the waiting write.
      const second = store
        .appendEvents([event('d1', 'delivery.assigned'), event('d2', 'delivery.created')])
        .finally(() => settled.push('second'));
      const owner = store.recordOwner('d1', 'owner-hash', 'PLATFORM').finally(() => settled.push('owner'));
      await turnOfTheEventLoop();
      expect(settled).toEqual([]);
      lock.release();
      const [stored, more] = await Promise.all([first, second, owner]);
      expect(stored!.map((result) => [result.event.seq, result.event.name])).toEqual([[1, 'delivery.created']]);
      expect(more!.map((result) => [result.event.seq, result.event.name])).toEqual([
        [2, 'delivery.assigned'],
        [3, 'delivery.created'],
      ]);
      // Answered in the order they were sent, each read back once answered.
      expect(settled).toEqual(['first', 'second', 'owner']);
      expect(await store.ownerOf('d1')).toBe('owner-hash');
      expect((await store.deliveryState('d1'))?.seq).toBe(2);
    } finally {
      await store.close();
    }
  });

  it('reads back an owner record sent before the read, while its commit still waits; not once its write failed', async () => {
    const store = openStore();
    try {
      await store.ping();
      const lock = holdWriteLock(store);
      const recorded = store.recordOwners([{ uid: 'd1', owner: 'owner-hash', group: 'PARTNER' }]);
      await turnOfTheEventLoop();
      // The access check of a webhook or read that follows the write must not find "no record".
      expect(await store.ownersOf(['d1', 'd2'])).toEqual(
        new Map([['d1', { owner: 'owner-hash', group: 'PARTNER', proof: 'read' }]]),
      );
      lock.release();
      await recorded;
      expect(await store.ownerOf('d1')).toBe('owner-hash');
      // A write that fails (the thread is gone) leaves nothing behind to read.
      await store.writerThread.terminate();
      await expect(store.recordOwner('d2', 'other-hash')).rejects.toThrow(/SQLite writer thread stopped/);
      expect(await store.ownerOf('d2')).toBeUndefined();
    } finally {
      await store.close();
    }
  });

  it('fails the write waiting on a thread that dies, and every later one, with a clear error; reads go on', async () => {
    const store = openStore();
    try {
      await store.appendEvents([event('d1', 'delivery.created')]);
      const lock = holdWriteLock(store);
      const waiting = store.appendEvents([event('d1', 'delivery.assigned')]);
      const stopped = store.writerThread.terminate();
      lock.release();
      await stopped;
      await expect(waiting).rejects.toThrow(/SQLite writer thread stopped/);
      await expect(store.recordOwner('d1', 'owner-hash')).rejects.toThrow(/SQLite writer thread stopped/);
      await expect(store.claimIdempotency('owner-hash', 'key', 'fingerprint')).rejects.toThrow(
        /SQLite writer thread stopped/,
      );
      await expect(store.ping()).rejects.toThrow(/SQLite writer thread stopped/);
      expect((await store.eventsAfter(0, 10)).map((stored) => stored.name)).toEqual(['delivery.created']);
    } finally {
      await store.close();
    }
  });

  it('stores a batch in one savepoint, and when one of its events cannot be written, that one fails alone', async () => {
    const store = openStore();
    // A batch that writes: every event stored, in order.
    const stored = await store.appendEvents([
      event('batch-a', 'delivery.created'),
      event('batch-b', 'delivery.created'),
      event('batch-a', 'delivery.assigned'),
    ]);
    expect(stored.map((result) => [result.event.uid, result.event.name, result.duplicate])).toEqual([
      ['batch-a', 'delivery.created', false],
      ['batch-b', 'delivery.created', false],
      ['batch-a', 'delivery.assigned', false],
    ]);
    // An event without a uid cannot be written (the receiver never sends one: the store must still not lose the
    // others).
    const broken = {
      payload: { event_name: 'delivery.created' } as WireWebhookEvent,
      receivedAt: new Date().toISOString(),
    };
    const before = await store.lastSeq();
    const failure = await store
      .appendEvents([event('mixed-a', 'delivery.created'), broken, event('mixed-b', 'delivery.created')])
      .then(
        () => undefined,
        (error: unknown) =>
          error as { name: string; outcomes: Array<{ event?: { uid: string; seq: number } } | Error> },
      );
    expect(failure?.name).toBe('PartialAppendError');
    expect(failure!.outcomes[1]).toBeInstanceOf(Error);
    const [first, , third] = failure!.outcomes as Array<{ event: { uid: string; seq: number } }>;
    expect([first!.event.uid, third!.event.uid]).toEqual(['mixed-a', 'mixed-b']);
    // The two were stored, and nothing of the broken one: the log grew by two.
    const log = await store.eventsAfter(before, 10);
    expect(log.map((stored) => stored.uid)).toEqual(['mixed-a', 'mixed-b']);
    expect(log.map((stored) => stored.seq)).toEqual([first!.event.seq, third!.event.seq]);
    await store.close();
  });

  it('closes after the writes sent before close() have committed', async () => {
    const store = openStore();
    const appended = store.appendEvents([event('d1', 'delivery.created')]);
    await store.close();
    expect(await appended).toHaveLength(1);
    await expect(store.recordOwner('d1', 'owner-hash')).rejects.toThrow(/SQLite store is closed/);
    const again = new SqliteStore(path.dirname(store.db.name));
    try {
      expect(await again.lastSeq()).toBe(1);
    } finally {
      await again.close();
    }
  });

  it('is not ready (503) once the writer thread has died, and says why', async () => {
    const stack = await startStack();
    try {
      const ready = async () => {
        const response = await fetch(`${stack.app.url}/ready`);
        return { status: response.status, body: (await response.json()) as { status: string; store?: string } };
      };
      expect((await ready()).status).toBe(200);
      await (stack.app.services.store as SqliteStore).writerThread.terminate();
      // A store answer is reused for up to 1 s.
      let answer = await ready();
      while (answer.status === 200) answer = await ready();
      expect(answer.status).toBe(503);
      expect(answer.body).toMatchObject({
        status: 'store unavailable',
        store: expect.stringMatching(/SQLite writer thread stopped/),
      });
    } finally {
      await stack.stop();
    }
  });
});

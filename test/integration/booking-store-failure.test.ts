// A booking the upstream made is its caller's, whatever the store does. The
// store here is the real SqliteStore behind a switch that makes its writes fail
// as a full disk does (SQLITE_FULL), from the start of a booking or only after
// its idempotency claim was taken; the upstream is the sandbox over real HTTP,
// whose request log counts the bookings it made.
import { afterAll, beforeAll, beforeEach, describe, expect, it, vi } from 'vitest';
import { hashKey } from '../../src/domain/merchant-key.js';
import { createLogger } from '../../src/logger.js';
import { SqliteStore } from '../../src/store/sqlite.js';
import type { Store } from '../../src/store/store.js';
import { deliveryInput, startStack, type Stack } from '../helpers/stack.js';
import { collect, wsClient } from '../helpers/ws-client.js';

const CREATE = /* GraphQL */ `
  mutation Book($input: DeliveryInput!, $key: String) {
    createDelivery(input: $input, idempotencyKey: $key) {
      __typename
      ... on MutationCreateDeliverySuccess {
        data {
          uid
          trackingUrl
          status
        }
      }
      ... on Error {
        code
        message
      }
    }
  }
`;
const READ = /* GraphQL */ `
  query ($uid: ID!) {
    delivery(uid: $uid) {
      uid
      trackingUrl
    }
  }
`;

/** Every method of the Store that writes. */
const WRITES = new Set<string>([
  'appendEvents',
  'claimIdempotency',
  'completeIdempotency',
  'releaseIdempotency',
  'markIdempotencyUnknown',
  'resolveBookingMarker',
  'recordOwner',
  'recordOwners',
  'cursorSecret',
  'ping',
]);

const disk = {
  /** Every write fails while this is set. */
  full: false,
  /** The next idempotency claim that succeeds fills the disk behind it. */
  fullAfterClaim: false,
};

/** The real store, its writes failing as on a full disk while `disk.full` is set. */
function onDisk(store: SqliteStore): Store {
  return new Proxy(store, {
    get(target, name, receiver) {
      const value = Reflect.get(target, name, receiver) as unknown;
      if (typeof value !== 'function') return value;
      const method = (value as (...args: unknown[]) => unknown).bind(target);
      if (!WRITES.has(String(name))) return method;
      return async (...args: unknown[]) => {
        if (disk.full)
          throw Object.assign(new Error('database or disk is full'), { name: 'SqliteError', code: 'SQLITE_FULL' });
        const answer = await method(...args);
        if (name === 'claimIdempotency' && disk.fullAfterClaim) {
          disk.fullAfterClaim = false;
          disk.full = true;
        }
        return answer;
      };
    },
  });
}

let stack: Stack;
/** The real store of the running app (a restart opens another). */
let file: SqliteStore;
const logLines: string[] = [];

beforeAll(async () => {
  stack = await startStack({
    store: (dataDir) => onDisk((file = new SqliteStore(dataDir))),
    logger: createLogger('info', { write: (line: string) => void logLines.push(line) }),
  });
});
afterAll(async () => {
  disk.full = false;
  await stack?.stop();
});
beforeEach(() => {
  disk.full = false;
  disk.fullAfterClaim = false;
});

const book = (input = deliveryInput(), key?: string) => stack.gql(CREATE, { input, key });
const bookingsSince = (mark: number) =>
  stack.sandbox.requestsSince(mark).filter((r) => r.method === 'POST' && /\/deliveries$/.test(r.path));
/** The log lines that name `uid` and say a booking could not be recorded. */
const failuresLoggedFor = (uid: string) =>
  logLines
    .map((line) => JSON.parse(line) as { msg: string; uid?: string })
    .filter((line) => line.uid === uid && /could not record a booking/.test(line.msg));
const claimInFile = (idempotencyKey: string) =>
  file.db
    .prepare('SELECT state, uid FROM idempotency WHERE owner_hash = ? AND idempotency_key = ?')
    .get(hashKey(stack.key), idempotencyKey);

describe('a booking while the store cannot write', () => {
  it('without an idempotencyKey: the caller gets its booking, the booker reads it, and it is recorded once writes work', async () => {
    const mark = stack.sandbox.requestCount;
    disk.full = true;
    const booked = await book();
    expect(booked.errors).toBeUndefined();
    expect(booked.data.createDelivery.__typename).toBe('MutationCreateDeliverySuccess');
    const { uid, trackingUrl } = booked.data.createDelivery.data;
    expect(trackingUrl).toContain(uid);
    expect(bookingsSince(mark)).toHaveLength(1);

    // The owner record waits in memory and decides reads: the booker's, not another merchant's of the same platform.
    expect((await stack.gql(READ, { uid })).data.delivery).toEqual({ uid, trackingUrl });
    expect((await stack.gql(READ, { uid }, stack.otherKey)).data.delivery).toBeNull();
    expect(await file.ownerOf(uid)).toBeUndefined();
    // And follows it over a WebSocket; the other merchant cannot.
    const FOLLOW = 'subscription ($uid: ID!) { deliveryUpdated(uid: $uid) { uid status } }';
    const mine = wsClient(stack.app.url, stack.key);
    const theirs = wsClient(stack.app.url, stack.otherKey);
    try {
      const followed = collect(mine, FOLLOW, { uid });
      expect((await followed.waitFor(1))[0]).toEqual({ deliveryUpdated: { uid, status: 'CREATED' } });
      const refused = collect(theirs, FOLLOW, { uid });
      await refused.done;
      expect(refused.items).toEqual([]);
      expect(refused.errors).toHaveLength(1);
    } finally {
      await Promise.all([mine.dispose(), theirs.dispose()]);
    }

    // Logged once, with the uid and without the key.
    const logged = failuresLoggedFor(uid);
    expect(logged).toHaveLength(1);
    expect(JSON.stringify(logged)).not.toContain(stack.key);

    // The disk has room again: the retry timer writes the record.
    disk.full = false;
    await vi.waitFor(async () => expect(await file.ownerOf(uid)).toBe(hashKey(stack.key)), {
      timeout: 10_000,
      interval: 50,
    });
    expect(failuresLoggedFor(uid)).toHaveLength(1);
    expect(bookingsSince(mark)).toHaveLength(1);
  });

  it('with an idempotencyKey: a retry gets the same booking while its claim waits in memory; the claim is completed once writes work, and holds across a restart', async () => {
    const mark = stack.sandbox.requestCount;
    // The claim is written, then the disk fills before the booking's result can be.
    disk.fullAfterClaim = true;
    const booked = await book(deliveryInput(), 'disk-full-booking');
    expect(booked.errors).toBeUndefined();
    expect(booked.data.createDelivery.__typename).toBe('MutationCreateDeliverySuccess');
    const { uid } = booked.data.createDelivery.data;
    expect(disk.full).toBe(true);
    expect(claimInFile('disk-full-booking')).toEqual({ state: 'pending', uid: null });

    // A retry of the key books nothing and gets the same booking; other input with it is a conflict.
    const again = await book(deliveryInput(), 'disk-full-booking');
    expect(again.data.createDelivery).toMatchObject({ __typename: 'MutationCreateDeliverySuccess', data: { uid } });
    const other = await book(deliveryInput({ description: 'Something else' }), 'disk-full-booking');
    expect(other.data.createDelivery).toMatchObject({ code: 'IDEMPOTENCY_CONFLICT' });
    expect(bookingsSince(mark)).toHaveLength(1);
    expect((await stack.gql(READ, { uid })).data.delivery).toMatchObject({ uid });
    expect(failuresLoggedFor(uid)).toHaveLength(1);
    expect(JSON.stringify(failuresLoggedFor(uid))).not.toContain('disk-full-booking');

    // Writes work again: the next booking's write brings the waiting one with it.
    disk.full = false;
    const next = await book();
    expect(next.data.createDelivery.__typename).toBe('MutationCreateDeliverySuccess');
    await vi.waitFor(() => expect(claimInFile('disk-full-booking')).toEqual({ state: 'done', uid }), {
      timeout: 10_000,
      interval: 50,
    });
    expect(await file.ownerOf(uid)).toBe(hashKey(stack.key));

    // A new process knows it from the file alone.
    await stack.restart();
    const afterRestart = await book(deliveryInput(), 'disk-full-booking');
    expect(afterRestart.data.createDelivery).toMatchObject({
      __typename: 'MutationCreateDeliverySuccess',
      data: { uid },
    });
    expect(bookingsSince(mark)).toHaveLength(2);
  });
});

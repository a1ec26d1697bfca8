// Stacks for the tracking tests (issue 30): a whole facade over the sandbox, on
// the embedded SQLite store or on Redis, and what those tests share: booking a
// delivery with a sandbox script, the upstream's truth as the facade spells it,
// and subscriptions that note what the upstream said when they completed.
// On Redis each stack keeps its keys under a prefix of its own, so it can use a
// shared server (REDIS_TEST_URL, as .ci/run exports) beside other tests; without
// one, a private redis-server for the file.
import { randomUUID } from 'node:crypto';
import type { Client } from 'graphql-ws';
import { Redis } from 'ioredis';
import { expect } from 'vitest';
import { startApp, type App } from '../../src/app.js';
import { loadConfig } from '../../src/config.js';
import { RedisStore } from '../../src/store/redis.js';
import type { DeliveryHistory } from '@delivery-graph/sandbox';
import { redisAvailable, startRedisServer, type RedisServer } from './redis.js';
import { deliveryInput, startStack, type Stack, type StackOptions } from './stack.js';
import { collect, type Collected } from './ws-client.js';

export type StoreKind = 'SQLite' | 'Redis';

export interface TrackingStores {
  /** [name, enabled] for describe.each. */
  cases: Array<[StoreKind, boolean]>;
  /** Starts the private redis-server when one is needed (call in beforeAll). */
  setup(): Promise<void>;
  /** Stops it (call in afterAll). */
  teardown(): Promise<void>;
  /** A stack on that store; on Redis, under a prefix of its own, removed again by stop(). */
  start(kind: StoreKind, options?: StackOptions): Promise<Stack>;
  /**
   * On Redis: another facade instance beside `stack`, on the same sandbox and the same keys of the store (the webhooks
   * still go to `stack`); its stop() leaves the keys to `stack`.
   */
  another(stack: Stack): Promise<App>;
}

export function trackingStores(file: string): TrackingStores {
  const given = process.env.REDIS_TEST_URL;
  const withRedis = Boolean(given) || redisAvailable(file);
  let server: RedisServer | undefined;
  const prefixOf = new WeakMap<Stack, string>();
  const url = () => given ?? server!.url;
  return {
    cases: [
      ['SQLite', true],
      ['Redis', withRedis],
    ],
    async setup() {
      if (withRedis && !given) server = await startRedisServer();
    },
    async teardown() {
      await server?.stop();
    },
    async start(kind, options = {}) {
      if (kind === 'SQLite') return startStack(options);
      const prefix = `tracking:${randomUUID()}:`;
      const stack = await startStack({
        ...options,
        env: { REDIS_URL: url(), ...options.env },
        store: () => RedisStore.connect(url(), { prefix }),
      });
      prefixOf.set(stack, prefix);
      const stop = stack.stop.bind(stack);
      stack.stop = async () => {
        await stop();
        await removeKeys(url(), prefix);
      };
      return stack;
    },
    async another(stack) {
      const prefix = prefixOf.get(stack);
      if (!prefix) throw new Error('another: a stack on Redis from start()');
      return startApp(loadConfig(stack.env), { store: RedisStore.connect(url(), { prefix }) });
    },
  };
}

/** Deletes every key under the prefix (a shared server keeps nothing of the test). */
async function removeKeys(url: string, prefix: string): Promise<void> {
  const client = new Redis(url, { lazyConnect: false });
  try {
    let cursor = '0';
    do {
      const [next, keys] = await client.scan(cursor, 'MATCH', `${prefix}*`, 'COUNT', 1000);
      cursor = next;
      if (keys.length > 0) await client.del(...keys);
    } while (cursor !== '0');
  } finally {
    client.disconnect();
  }
}

const CREATE = `mutation($input: DeliveryInput!) { createDelivery(input: $input) { __typename ... on MutationCreateDeliverySuccess { data { uid } } } }`;
const CANCEL = `mutation($uid: ID!) { cancelDelivery(uid: $uid) { __typename } }`;

/**
 * Books a delivery through the facade with this sandbox payload (outcome, webhook script); fails loudly when refused.
 */
export async function bookScripted(stack: Stack, payload: Record<string, unknown>): Promise<string> {
  const result = await stack.gql(CREATE, { input: deliveryInput({ payload: { orderId: 'A-1', ...payload } }) });
  const uid = result.data?.createDelivery?.data?.uid as string | undefined;
  if (!uid) throw new Error(`booking refused: ${JSON.stringify(result)}`);
  return uid;
}

/** A merchant cancel through the facade; fails loudly when refused. */
export async function cancelThroughFacade(stack: Stack, uid: string): Promise<void> {
  const result = await stack.gql(CANCEL, { uid });
  expect(result.data?.cancelDelivery?.__typename, JSON.stringify(result)).toBe('MutationCancelDeliverySuccess');
}

/** The sandbox's whole story of a delivery (it must still be kept). */
export function truthOf(stack: Stack, uid: string): DeliveryHistory {
  const history = stack.sandbox.history(uid);
  if (!history) throw new Error(`the sandbox keeps no history of ${uid}`);
  return history;
}

/**
 * A read status as the facade's enum spells it: `Canceled` → `CANCELED`, `Return In Progress` → `RETURN_IN_PROGRESS`.
 */
export function asStatus(readStatus: string): string {
  return readStatus
    .trim()
    .toUpperCase()
    .replace(/[\s-]+/g, '_');
}

/** What the upstream said when a subscription completed. */
export interface AtCompletion {
  status: string;
  finished: boolean;
}

export type Followed<T = any> = Collected<T> & {
  /**
   * Set when the subscription completed: the upstream's status and whether it had finished, taken as the completion
   * arrived.
   */
  atCompletion?: AtCompletion;
};

/**
 * collect(), noting the sandbox's truth the moment the subscription completes
 * (the sandbox runs in this process: nothing of it moves between the complete
 * message and this note). A completion the facade sent early, at a state the
 * upstream had not settled on, shows as a note with `finished: false` or
 * another status.
 */
export function follow<T = any>(client: Client, stack: Stack, uid: string, query: string): Followed<T> {
  const followed: Followed<T> = collect<T>(client, query, { uid });
  void followed.done.then(() => {
    if (!followed.completed) return;
    const truth = stack.sandbox.history(uid);
    followed.atCompletion = { status: truth ? asStatus(truth.status) : 'UNKNOWN', finished: truth?.finished ?? false };
  });
  return followed;
}

/** Resolves when the subscription completes or errors, or rejects after `ms` with what it saw. */
export async function settled(followed: Collected, ms: number, what: string): Promise<void> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(
      () =>
        reject(
          new Error(
            `${what}: not complete after ${ms} ms; saw ${JSON.stringify(followed.items)}; errors ${JSON.stringify(followed.errors)}`,
          ),
        ),
      ms,
    );
  });
  try {
    await Promise.race([followed.done, timeout]);
  } finally {
    clearTimeout(timer);
  }
}

// Where automatic persisted queries (APQ) are remembered: an LRU in this
// process, and with REDIS_URL the store's Redis behind it, so a query one
// instance learned is found by hash on every other. Both sides are bounded: the
// LRU by APQ_MAX_ENTRIES and by the bytes it holds; Redis by the same number of
// entries (an index of registrations, the oldest dropped first), a smaller
// largest entry, and a TTL that each use refreshes. Only merchant keys the
// upstream accepted register (pipeline.ts; not client tokens), so the worst one
// merchant can do is churn the shared entries, not grow Redis. The LRU weighs
// each query by the heap it holds (weights.ts), not by its length. Redis is a
// cache here: when it does not answer, a lookup is a miss (the client sends the
// full query again) and a registration stays local.
import type { Redis } from 'ioredis';
import { LRUCache } from 'lru-cache';
import type { Logger } from '../logger.js';
import { PERSISTED_QUERY_ENTRY_BYTES, stringBytes } from './weights.js';

export interface PersistedQueryStore {
  /** The query text registered under this hash (lowercase hex), if any. */
  get(hash: string): Promise<string | undefined>;
  /** Remembers a query under its hash; never throws. */
  set(hash: string, query: string): Promise<void>;
}

/**
 * Longest query text remembered: it still runs when longer, but is not kept (valid documents of 2,000 tokens fit with
 * room to spare).
 */
export const APQ_MAX_QUERY_BYTES = 64 * 1024;
/** Most heap the in-process LRU holds (hashes, query texts, their slots), whatever APQ_MAX_ENTRIES says. */
export const APQ_MAX_LOCAL_BYTES = 64 * 1024 * 1024;
/**
 * Longest query text shared through Redis; longer ones (rare: 16 KiB is a very large operation) stay in each process's
 * LRU.
 */
export const APQ_MAX_SHARED_QUERY_BYTES = 16 * 1024;
/** How long Redis keeps a query after its last use (GETEX refreshes it). */
export const APQ_REDIS_TTL_SECONDS = 24 * 60 * 60;

/**
 * What one remembered query holds in the heap: its hash, its text (one or two bytes a character, as V8 stores it) and
 * its slot.
 */
export function persistedQueryBytes(hash: string, query: string): number {
  return stringBytes(hash) + stringBytes(query) + PERSISTED_QUERY_ENTRY_BYTES;
}

/**
 * The in-process LRU: at most `maxEntries` queries and APQ_MAX_LOCAL_BYTES of heap; the least recently used goes first.
 */
export function localPersistedQueryStore(maxEntries: number): PersistedQueryStore {
  const cache = new LRUCache<string, string>({
    max: maxEntries,
    maxSize: APQ_MAX_LOCAL_BYTES,
    // The heaviest text registration lets in: APQ_MAX_QUERY_BYTES of UTF-8 is at most as many characters, two bytes
    // each.
    maxEntrySize: persistedQueryBytes('0'.repeat(64), '\u0100'.repeat(APQ_MAX_QUERY_BYTES)),
    sizeCalculation: (query, hash) => persistedQueryBytes(hash, query),
  });
  return {
    get: async (hash) => cache.get(hash),
    set: async (hash, query) => void cache.set(hash, query),
  };
}

/**
 * Registers a query and keeps Redis's share bounded. KEYS: the query's key, the
 * index (a sorted set of query keys by registration order), the counter that
 * orders them (a clock could tie). ARGV: query text, TTL in seconds, most
 * entries. Past the most, the earliest registered go
 * (their keys are read from the index, so they are not in KEYS: fine on a single
 * Redis, which is what the facade supports).
 */
const REGISTER = `
redis.call('SET', KEYS[1], ARGV[1], 'EX', tonumber(ARGV[2]))
redis.call('ZADD', KEYS[2], redis.call('INCR', KEYS[3]), KEYS[1])
local extra = redis.call('ZCARD', KEYS[2]) - tonumber(ARGV[3])
if extra > 0 then
  local oldest = redis.call('ZRANGE', KEYS[2], 0, extra - 1)
  redis.call('ZREMRANGEBYRANK', KEYS[2], 0, extra - 1)
  for _, key in ipairs(oldest) do redis.call('DEL', key) end
end
return extra
`;

export interface SharedStoreOptions {
  client: Redis;
  /** Most queries Redis holds for all instances together (APQ_MAX_ENTRIES). */
  maxEntries: number;
  /** The store's key prefix ("dg:"); queries live at <prefix>apq:<sha256>. */
  prefix: string;
  logger?: Logger;
  ttlSeconds?: number;
}

/**
 * The local LRU in front of Redis. A hash the LRU lacks is read from Redis (and
 * its TTL refreshed); a registration goes to both. While the Redis client is
 * not ready, Redis is skipped at once rather than waiting out reconnection.
 */
export function sharedPersistedQueryStore(
  local: PersistedQueryStore,
  { client, prefix, maxEntries, logger, ttlSeconds = APQ_REDIS_TTL_SECONDS }: SharedStoreOptions,
): PersistedQueryStore {
  const keyOf = (hash: string) => `${prefix}apq:${hash}`;
  const index = `${prefix}apq-index`;
  const order = `${prefix}apq-order`;
  // One warning per outage, not one per request.
  let failing = false;
  const failed = (error: unknown) => {
    if (!failing)
      logger?.warn(
        { err: error instanceof Error ? error.message : String(error) },
        'redis did not answer a persisted query lookup: this instance uses its own memory until it does',
      );
    failing = true;
  };
  const ready = () => client.status === 'ready';
  return {
    async get(hash) {
      const known = await local.get(hash);
      if (known !== undefined || !ready()) return known;
      try {
        const shared = await client.getex(keyOf(hash), 'EX', ttlSeconds);
        failing = false;
        if (shared === null) return undefined;
        await local.set(hash, shared);
        return shared;
      } catch (error) {
        failed(error);
        return undefined;
      }
    },
    async set(hash, query) {
      await local.set(hash, query);
      if (!ready() || Buffer.byteLength(query) > APQ_MAX_SHARED_QUERY_BYTES) return;
      try {
        // Registrations are rare (once per operation and deployment): the script text each time is fine.
        await client.eval(REGISTER, 3, keyOf(hash), index, order, query, String(ttlSeconds), String(maxEntries));
        failing = false;
      } catch (error) {
        failed(error);
      }
    },
  };
}

// The store this configuration asks for. With REDIS_URL (or REDIS_SENTINELS),
// events, dedup, idempotency, limits and fan-out are shared by every instance on
// that Redis; else SQLite in DATA_DIR, whose lock holds the folder (the sandbox's
// world included). Both trim what is older than its retention on a timer, until close().
import type { Config } from '../config.js';
import type { Logger } from '../logger.js';
import type { RedisStore } from './redis.js';
import { SqliteStore } from './sqlite.js';
import { REDIS_STORE, type Store } from './store.js';

export async function openStore(config: Config, logger: Logger): Promise<Store> {
  const retention = {
    eventRetentionMs: config.eventRetentionMs,
    idempotencyRetentionMs: config.idempotencyRetentionMs,
  };
  // The Redis store's module (and ioredis with it) is loaded only when it is asked for.
  return (config.redisUrl ?? config.redisSentinel)
    ? (await import('./redis.js')).RedisStore.connect((config.redisUrl ?? config.redisSentinel)!, {
        logger,
        retention,
        replicaAcks: { min: config.redisMinReplicasAck, timeoutMs: config.redisReplicaAckTimeoutMs },
      })
    : new SqliteStore(config.dataDir, { retention, logger });
}

/** The store as the Redis store, when that is what it is (known without loading the Redis store's module). */
export function redisOf(store: Store): RedisStore | undefined {
  return REDIS_STORE in store ? (store as RedisStore) : undefined;
}

// The store this configuration asks for. With REDIS_URL (or REDIS_SENTINELS),
// events, dedup, idempotency, limits and fan-out are shared by every instance on
// that Redis; else SQLite in DATA_DIR, whose lock holds the folder (the sandbox's
// world included). Both trim what is older than its retention on a timer, until close().
import type { Config } from '../config.js';
import type { Logger } from '../logger.js';
import { RedisStore } from './redis.js';
import { SqliteStore } from './sqlite.js';
import type { Store } from './store.js';

export function openStore(config: Config, logger: Logger): Store {
  const retention = {
    eventRetentionMs: config.eventRetentionMs,
    idempotencyRetentionMs: config.idempotencyRetentionMs,
  };
  return (config.redisUrl ?? config.redisSentinel)
    ? RedisStore.connect((config.redisUrl ?? config.redisSentinel)!, {
        logger,
        retention,
        replicaAcks: { min: config.redisMinReplicasAck, timeoutMs: config.redisReplicaAckTimeoutMs },
      })
    : new SqliteStore(config.dataDir, { retention, logger });
}

// The store and how long it keeps things: the embedded SQLite file under DATA_DIR, or Redis (one server, or the
// primary the Sentinels name), and the retention of events and idempotency keys.
import path from 'node:path';
import { ConfigError, duration, integer, oneOf, text, type Env } from './parse.js';

export interface StoreSettings {
  readonly dataDir: string;
  readonly redisUrl: string | undefined;
  /**
   * REDIS_SENTINELS and REDIS_SENTINEL_NAME (instead of REDIS_URL): the Sentinels that say which server is the primary
   * now.
   */
  readonly redisSentinel: RedisSentinelConfig | undefined;
  /**
   * REDIS_MIN_REPLICAS_ACK: replicas that must confirm a stored batch before its webhooks are acknowledged (undefined:
   * 1 when the primary has any).
   */
  readonly redisMinReplicasAck: number | undefined;
  /** REDIS_REPLICA_ACK_TIMEOUT_MS: how long a batch waits for them before its webhooks are answered 503. */
  readonly redisReplicaAckTimeoutMs: number;
  /** How long stored events, their de-duplication entries and ownership records are kept. */
  readonly eventRetentionMs: number;
  /** How long idempotency keys are kept. */
  readonly idempotencyRetentionMs: number;
}

export interface RedisSentinelConfig {
  sentinels: Array<{ host: string; port: number }>;
  /** The monitored primary's name (`sentinel monitor <name> …`). */
  name: string;
  /** REDIS_PASSWORD (and REDIS_USERNAME): for the primary and replicas. */
  password: string | undefined;
  username: string | undefined;
  /** REDIS_SENTINEL_PASSWORD: for the Sentinels themselves. */
  sentinelPassword: string | undefined;
  /** REDIS_TLS: TLS to the primary and replicas; REDIS_SENTINEL_TLS: to the Sentinels. */
  tls: boolean;
  sentinelTls: boolean;
}

/** Where events, idempotency keys and ownership records are kept, and for how long. */
export function storeSettings(env: Env): StoreSettings {
  const eventRetentionMs = duration(env, 'EVENT_RETENTION', '30d', 1_000);
  const redisUrl = text(env, 'REDIS_URL');
  if (redisUrl !== undefined && !/^rediss?:\/\//.test(redisUrl))
    throw new ConfigError('REDIS_URL', 'expected redis:// or rediss://');
  const redisSentinel = sentinelConfig(env);
  if (redisSentinel && redisUrl !== undefined)
    throw new ConfigError('REDIS_SENTINELS', 'set either REDIS_URL or REDIS_SENTINELS, not both');
  return {
    dataDir: path.resolve(text(env, 'DATA_DIR') ?? './data'),
    redisUrl,
    redisSentinel,
    redisMinReplicasAck:
      text(env, 'REDIS_MIN_REPLICAS_ACK') === undefined ? undefined : integer(env, 'REDIS_MIN_REPLICAS_ACK', 1, 0, 16),
    redisReplicaAckTimeoutMs: integer(env, 'REDIS_REPLICA_ACK_TIMEOUT_MS', 1000, 10, 60_000),
    eventRetentionMs,
    idempotencyRetentionMs: duration(env, 'IDEMPOTENCY_RETENTION', '24h', 1_000),
  };
}

/** REDIS_SENTINELS=host:port,host:port with REDIS_SENTINEL_NAME, or nothing. */
function sentinelConfig(env: Env): RedisSentinelConfig | undefined {
  const raw = text(env, 'REDIS_SENTINELS');
  const name = text(env, 'REDIS_SENTINEL_NAME');
  if (raw === undefined) {
    if (name !== undefined)
      throw new ConfigError('REDIS_SENTINEL_NAME', 'set with REDIS_SENTINELS (the Sentinels to ask for this primary)');
    return undefined;
  }
  const sentinels = raw
    .split(',')
    .map((part) => part.trim())
    .filter(Boolean)
    .map((part) => {
      const match = /^(\[[^\]]+\]|[^:\s]+):(\d{1,5})$/.exec(part);
      const port = match ? Number(match[2]) : NaN;
      if (!match || port < 1 || port > 65535)
        throw new ConfigError('REDIS_SENTINELS', `expected comma-separated host:port, got "${part}"`);
      return { host: match[1]!.replace(/^\[|\]$/g, ''), port };
    });
  if (sentinels.length === 0) throw new ConfigError('REDIS_SENTINELS', 'expected comma-separated host:port');
  if (name === undefined)
    throw new ConfigError(
      'REDIS_SENTINEL_NAME',
      'required with REDIS_SENTINELS: the name the Sentinels monitor the primary under (`sentinel monitor <name> …`)',
    );
  return {
    sentinels,
    name,
    password: text(env, 'REDIS_PASSWORD'),
    username: text(env, 'REDIS_USERNAME'),
    sentinelPassword: text(env, 'REDIS_SENTINEL_PASSWORD'),
    tls: oneOf(env, 'REDIS_TLS', ['true', 'false'] as const, 'false') === 'true',
    sentinelTls: oneOf(env, 'REDIS_SENTINEL_TLS', ['true', 'false'] as const, 'false') === 'true',
  };
}

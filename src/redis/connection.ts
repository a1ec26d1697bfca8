// How every Redis client of the facade connects (the store's, the event bus's
// subscriber, the shared rate limits on the store's): one set of settings, and
// one log line per lost or regained connection, never with the URL.
import { Redis, type RedisOptions } from 'ioredis';
import type { RedisSentinelConfig } from '../config.js';
import type { Logger } from '../logger.js';

/** Where the facade's Redis is: a URL (REDIS_URL), or the Sentinels that name its primary (REDIS_SENTINELS). */
export type RedisConnection = string | RedisSentinelConfig;

/**
 * Connection settings for every client of the facade. A command waits through at
 * most two reconnection attempts (a few hundred ms of outage) and then fails, so
 * a webhook is answered 503 instead of hanging; a Redis that accepts connections
 * but does not answer fails commands after commandTimeout.
 */
export function redisOptions(name: string): RedisOptions {
  return {
    connectionName: name,
    maxRetriesPerRequest: 2,
    retryStrategy: (attempt) => Math.min(attempt * 50, 1000),
    commandTimeout: 5000,
  };
}

/**
 * A new client of `connection`. Through Sentinels, ioredis asks them for the
 * primary on every (re)connection and checks that the server it reached is one,
 * so after a failover the next connection goes to the promoted replica; a
 * server that answers READONLY (a demoted primary) makes it reconnect and ask again.
 */
export function connectRedis(connection: RedisConnection, name: string): Redis {
  return rememberConnectionErrors(connect(connection, name));
}

function connect(connection: RedisConnection, name: string): Redis {
  if (typeof connection === 'string') return new Redis(connection, redisOptions(name));
  return new Redis({
    ...redisOptions(name),
    sentinels: connection.sentinels,
    name: connection.name,
    password: connection.password,
    username: connection.username,
    sentinelPassword: connection.sentinelPassword,
    ...(connection.tls ? { tls: {}, enableTLSForSentinelMode: true } : {}),
    ...(connection.sentinelTls ? { sentinelTLS: {} } : {}),
    // Hears the Sentinels announce a new primary instead of waiting for the old one's connection to fail.
    failoverDetector: true,
    reconnectOnError: (error) => (error.message.startsWith('READONLY') ? 2 : false),
  });
}

/** Logs when a client loses and regains Redis, once per change, never with the URL (it may hold a password). */
export function logConnection(client: Redis, name: string, logger: Logger | undefined): void {
  let lost = false;
  client.on('error', (error: Error) => {
    if (!lost) logger?.warn({ redis: name, err: error.message }, 'redis connection error');
    lost = true;
  });
  client.on('ready', () => {
    if (lost) logger?.info({ redis: name }, 'redis connection ready again');
    lost = false;
  });
}

/**
 * The last connection error of each client (connect ECONNREFUSED 10.0.0.5:6379): what a failed command is explained
 * with.
 */
const lastConnectionErrors = new WeakMap<Redis, string>();

function rememberConnectionErrors(client: Redis): Redis {
  client.on('error', (error: Error) => lastConnectionErrors.set(client, error.message));
  client.on('ready', () => lastConnectionErrors.delete(client));
  return client;
}

/**
 * Why a Redis command failed, in our words: ioredis says "Reached the max retries
 * per request limit (which is 2). Refer to "maxRetriesPerRequest" option for
 * details." when it simply cannot reach the server. The connection error it met
 * (never the URL, which may hold a password) says what is wrong.
 */
export function redisFailure(error: unknown, client: Redis): string {
  const message = error instanceof Error ? error.message : String(error);
  const connectionError = lastConnectionErrors.get(client);
  if (/max retries per request|Connection is closed|Stream isn't writeable/i.test(message)) {
    return `Redis cannot be reached${connectionError ? ` (${connectionError})` : ''}`;
  }
  if (/Command timed out/i.test(message))
    return `Redis accepted the connection but did not answer within ${redisOptions('').commandTimeout! / 1000} s`;
  return message;
}

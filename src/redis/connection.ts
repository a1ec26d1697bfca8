// How every Redis client of the facade connects (the store's, the event bus's
// subscriber, the shared rate limits on the store's): one set of settings, and
// one log line per lost or regained connection, never with the URL.
import type { Redis, RedisOptions } from 'ioredis';
import type { Logger } from '../logger.js';

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

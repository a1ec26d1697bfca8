// Fan-out between instances: every stored event is published once on one Redis
// channel through @graphql-yoga/redis-event-target, and every instance (the one
// that published it included: its copy comes back through Redis, nothing is
// dispatched locally before) hands it to its own subscribers.
//
// Two things pub/sub alone gets wrong, and this bus fixes from the event log:
// - order: instances publish concurrently, so seq 11 (stored on B) may arrive
//   before seq 10 (stored on A); the streams drop anything at or below the last
//   seq they yielded, so a late 10 would be lost. Events are dispatched in seq
//   order; an event that arrives ahead of a gap waits a moment for the gap to
//   fill, and then the gap is read from the store (the append script makes seq N
//   visible only with every seq below it, so the read is complete).
// - loss: Redis drops messages for a subscriber connection that is down. When the
//   subscribe connection is ready again, the bus reads the store after the last
//   seq it dispatched; a slow poll of the log's head also catches a publish that
//   failed after its event was stored.
// All of it dispatches to local listeners only, never republishes.
import { createRedisEventTarget } from '@graphql-yoga/redis-event-target';
import type { Redis } from 'ioredis';
import type { Logger } from '../logger.js';
import { logConnection, redisFailure, redisOptions } from '../redis/connection.js';
import type { RedisStore } from '../store/redis.js';
import type { Store, StoredEvent } from '../store/store.js';
import { createEventBus, type EventBus } from './bus.js';

/** Counters for tests and metrics. */
export interface RedisBusStats {
  /** Events handed to local listeners. */
  dispatched: number;
  /** Of those, read from the store (a gap, a reconnect or the poll) instead of received. */
  fromStore: number;
  /** Messages received for a seq already dispatched (or, at start, before it). */
  ignored: number;
  /** Catch-ups run after the subscribe connection came back. */
  reconnects: number;
}

export interface RedisEventBus extends EventBus {
  readonly stats: RedisBusStats;
  /** The last seq handed to local listeners. */
  lastDispatched(): number;
  /** Detaches from Redis and quits the subscribe client (which is this bus's own). */
  close(): Promise<void>;
}

export interface RedisEventBusOptions {
  /** Where gaps and missed events are read from. */
  store: Store;
  /** Any client; publishing shares it (the store's client does). */
  publishClient: Redis;
  /** A client of its own: it is put into subscriber mode. */
  subscribeClient: Redis;
  channel: string;
  logger?: Logger;
  /** How long an event ahead of a gap waits for the gap to fill by pub/sub before the store is read. */
  gapWaitMs?: number;
  /** How often the head of the log is compared with what was dispatched. */
  pollMs?: number;
}

const PAGE = 500;

export async function createRedisEventBus(options: RedisEventBusOptions): Promise<RedisEventBus> {
  const bus = new RedisBus(options);
  await bus.start();
  return bus;
}

/**
 * One instance's side of the channel: messages received in seq order, gaps and
 * losses read from the log, dispatched to local listeners only.
 */
class RedisBus implements RedisEventBus {
  readonly stats: RedisBusStats = { dispatched: 0, fromStore: 0, ignored: 0, reconnects: 0 };
  readonly #options: RedisEventBusOptions;
  readonly #gapWaitMs: number;
  readonly #pollMs: number;
  readonly #local = createEventBus();
  readonly #target: ReturnType<typeof createRedisEventTarget<CustomEvent<StoredEvent>>>;
  /** undefined until the start position is known. */
  #last: number | undefined;
  readonly #ahead = new Map<number, StoredEvent>();
  #gapTimer: NodeJS.Timeout | undefined;
  #reading: Promise<void> | undefined;
  #readAgain = false;
  /** The last read of the log failed: the next try waits a poll interval, not a gap's moment. */
  #readFailed = false;
  #closed = false;
  #disconnected = false;
  #poll: NodeJS.Timeout | undefined;

  constructor(options: RedisEventBusOptions) {
    this.#options = options;
    this.#gapWaitMs = options.gapWaitMs ?? 25;
    this.#pollMs = options.pollMs ?? 1000;
    this.#target = createRedisEventTarget<CustomEvent<StoredEvent>>({
      publishClient: this.#publisher(),
      subscribeClient: options.subscribeClient,
    });
  }

  readonly listen: EventBus['listen'] = (uid, listener, options) => this.#local.listen(uid, listener, options);
  readonly listenerCount: EventBus['listenerCount'] = () => this.#local.listenerCount();
  readonly lastDispatched = (): number => this.#last ?? 0;

  publish(event: StoredEvent): void {
    this.#target.dispatchEvent(new CustomEvent(this.#options.channel, { detail: event }));
  }

  /**
   * The target calls publishClient.publish and drops the promise: a publish that fails (Redis down) must not become an
   * unhandled rejection. The event is stored already; every instance's poll finds it.
   */
  #publisher(): Redis {
    const { publishClient, logger } = this.#options;
    return {
      publish: (topic: string, message: string) =>
        publishClient.publish(topic, message).catch((error: unknown) => {
          logger?.warn(
            { err: error instanceof Error ? error.message : error },
            'event stored but not published; instances catch up from the log',
          );
          return 0;
        }),
    } as unknown as Redis;
  }

  /** Subscribes, learns where the log stands, then watches the connection and polls the log's head. */
  async start(): Promise<void> {
    const { store, subscribeClient, channel } = this.#options;
    this.#target.addEventListener(channel, this.#onMessage);
    try {
      // The target subscribes without waiting; subscribing again is a no-op that
      // resolves once Redis confirmed, so nothing published from here on is missed.
      await subscribeClient.subscribe(channel);
      // Events stored before this point are the store's to replay (deliveryEvents(after:)), not the bus's.
      this.#last = await store.lastSeq();
    } catch (error) {
      subscribeClient.disconnect();
      throw error;
    }
    const last = this.#last;
    this.stats.ignored += [...this.#ahead.keys()].filter((seq) => seq <= last).length;
    this.#drainAhead();
    subscribeClient.on('close', this.#onClose);
    subscribeClient.on('ready', this.#onReady);
    this.#poll = setInterval(() => this.#pollHead(), this.#pollMs);
    this.#poll.unref();
  }

  #dispatch(event: StoredEvent, fromStore: boolean): void {
    this.#last = event.seq;
    this.stats.dispatched += 1;
    if (fromStore) this.stats.fromStore += 1;
    this.#local.publish(event);
  }

  readonly #onMessage = (event: CustomEvent<StoredEvent>): void => this.#receive(event.detail);

  #receive(event: StoredEvent): void {
    const last = this.#last;
    if (last !== undefined && event.seq <= last) {
      this.stats.ignored += 1;
      return;
    }
    if (last !== undefined && event.seq === last + 1) this.#dispatch(event, false);
    else this.#ahead.set(event.seq, event);
    this.#drainAhead();
  }

  /** Dispatches whatever waited and is next in line; if something still waits behind a gap, arms the gap timer. */
  #drainAhead(): void {
    if (this.#last === undefined) return;
    const ahead = this.#ahead;
    for (const seq of [...ahead.keys()]) if (seq <= this.#last) ahead.delete(seq);
    for (let next = ahead.get(this.#last + 1); next; next = ahead.get(this.#last + 1)) {
      ahead.delete(next.seq);
      this.#dispatch(next, false);
    }
    if (ahead.size === 0) {
      clearTimeout(this.#gapTimer);
      this.#gapTimer = undefined;
    } else if (!this.#gapTimer && !this.#closed) {
      this.#gapTimer = setTimeout(
        () => {
          this.#gapTimer = undefined;
          void this.#readStore();
        },
        this.#readFailed ? this.#pollMs : this.#gapWaitMs,
      );
    }
  }

  /**
   * Reads the log after the last dispatched seq and dispatches it; one read at a time, repeated when asked meanwhile.
   */
  #readStore(): Promise<void> {
    if (this.#reading) {
      this.#readAgain = true;
      return this.#reading;
    }
    this.#reading = this.#readPages();
    return this.#reading;
  }

  async #readPages(): Promise<void> {
    try {
      do {
        this.#readAgain = false;
        for (;;) {
          const last = this.#last;
          if (this.#closed || last === undefined) return;
          const page = await this.#options.store.eventsAfter(last, PAGE);
          for (const event of page) if (event.seq > this.#last!) this.#dispatch(event, true);
          if (page.length < PAGE) break;
        }
      } while (this.#readAgain);
      this.#readFailed = false;
    } catch (error) {
      // Redis is away: the reconnect, the poll or a gap timer reads again.
      if (!this.#readFailed)
        this.#options.logger?.warn(
          { err: error instanceof Error ? error.message : error },
          'could not read missed events from the log; retrying',
        );
      this.#readFailed = true;
      this.#readAgain = false;
    } finally {
      this.#reading = undefined;
      this.#drainAhead();
    }
  }

  readonly #onClose = (): void => {
    this.#disconnected = true;
  };

  readonly #onReady = (): void => {
    if (!this.#disconnected || this.#closed) return;
    this.#disconnected = false;
    this.stats.reconnects += 1;
    const { subscribeClient, channel, logger } = this.#options;
    // ioredis resubscribes right after 'ready'; this subscribe queues behind nothing
    // and resolves once Redis confirmed the channel, so the read that follows
    // overlaps with live messages instead of leaving a hole.
    subscribeClient.subscribe(channel).then(
      () => this.#readStore(),
      (error: unknown) => logger?.warn({ err: error instanceof Error ? error.message : error }, 'resubscribe failed'),
    );
  };

  /** Compares the log's head with what was dispatched: catches a publish that failed after its event was stored. */
  #pollHead(): void {
    if (this.#reading || this.#gapTimer || this.#closed || this.#last === undefined) return;
    const known = this.#last;
    this.#options.store.lastSeq().then(
      (head) => {
        if (head > known) void this.#readStore();
        else if (head < known && this.#last === known) {
          // Redis came back without its data (no AOF): the log starts over, and so must the bus.
          this.#options.logger?.error(
            { head, dispatched: known },
            'the event log went backwards: Redis lost its data; cursors given out before are void',
          );
          this.#last = head;
          this.#ahead.clear();
        }
      },
      () => {}, // Redis is away; the next tick asks again
    );
  }

  async close(): Promise<void> {
    if (this.#closed) return;
    this.#closed = true;
    clearInterval(this.#poll);
    clearTimeout(this.#gapTimer);
    const { subscribeClient } = this.#options;
    subscribeClient.off('close', this.#onClose);
    subscribeClient.off('ready', this.#onReady);
    // Not target.removeEventListener: its UNSUBSCRIBE promise is not awaited by
    // the target and would reject unhandled on a connection that is down.
    // Quitting the connection ends the subscription with it.
    await this.#reading;
    if (subscribeClient.status === 'ready') await subscribeClient.quit().catch(() => subscribeClient.disconnect());
    else subscribeClient.disconnect();
  }
}

/** The bus of a Redis store: publishes on the store's client, subscribes on a connection of its own. */
export async function connectRedisEventBus(store: RedisStore, logger?: Logger): Promise<RedisEventBus> {
  // Fails start-up in a moment when Redis is not there, before a subscriber would wait for it forever.
  try {
    await store.lastSeq();
  } catch (error) {
    throw new Error(
      `${store.client.options.sentinels ? 'REDIS_SENTINELS' : 'REDIS_URL'}: ${redisFailure(error, store.client)}`,
      { cause: error },
    );
  }
  await warnAboutSettings(store.client, logger);
  // A subscriber waits out outages however long: ioredis resubscribes, the bus catches up.
  const subscribeClient = store.client.duplicate({
    ...redisOptions('delivery-graph:subscriber'),
    maxRetriesPerRequest: null,
  });
  logConnection(subscribeClient, 'subscriber', logger);
  return createRedisEventBus({ store, publishClient: store.client, subscribeClient, channel: store.channel, logger });
}

/** Settings under which Redis would lose or evict what the facade acknowledged: said once, at start. */
async function warnAboutSettings(client: Redis, logger: Logger | undefined): Promise<void> {
  let info: string;
  try {
    info = await client.info();
  } catch {
    return; // INFO may be renamed or refused on a managed Redis
  }
  const field = (name: string) => new RegExp(`^${name}:(.*)$`, 'm').exec(info)?.[1]?.trim();
  const policy = field('maxmemory_policy');
  if (policy && policy !== 'noeviction') {
    logger?.warn(
      { maxmemoryPolicy: policy },
      'Redis may evict keys: de-duplication, idempotency and the event log need maxmemory-policy noeviction',
    );
  }
  if (field('aof_enabled') === '0') {
    logger?.warn(
      'Redis runs without AOF (appendonly no): a Redis crash or restart loses acknowledged webhooks; see docs/scale-out.md on what Redis settings guarantee',
    );
  }
}

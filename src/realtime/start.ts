// What keeps subscribers' deliveries current, built at start (app.ts wires it):
// the event bus, reconciliation with the owners' keys it reads with, the
// re-confirmation of open subscriptions' keys, read access per key, the caps on
// open subscriptions, the event pages and the shared fan-out. Each part that
// runs is registered for tear-down in the order it is made.
import type { Config } from '../config.js';
import type { Logger } from '../logger.js';
import type { Teardown } from '../lifecycle.js';
import { KeyWatch } from '../access/key-watch.js';
import type { Merchants } from '../access/merchants.js';
import type { Owners } from '../access/owners.js';
import { SubscriptionSlots } from '../access/subscription-slots.js';
import type { RedisStore } from '../store/redis.js';
import type { AppendCondition, AppendResult, NotStored, Store } from '../store/store.js';
import type { Upstream } from '../upstream/clients.js';
import type { WireWebhookEvent } from '../upstream/wire.js';
import { ReadAccess } from './access.js';
import { createEventBus, type EventBus } from './bus.js';
import { EventPages } from './event-pages.js';
import { SubscriptionFanout } from './fanout.js';
import { OwnerKeys } from './owner-keys.js';
import { Reconciler, type ReadKind } from './reconcile.js';

/** The event bus: over the store's Redis when it is one (every instance hears every event), else in this process. */
export async function openEventBus(
  redis: RedisStore | undefined,
  logger: Logger,
  teardown: Teardown,
): Promise<EventBus> {
  // Loaded only with Redis: the module brings @graphql-yoga/redis-event-target and ioredis, megabytes of heap that
  // a single process on SQLite would hold for nothing.
  const redisBus = redis ? await (await import('./redis-bus.js')).connectRedisEventBus(redis, logger) : undefined;
  if (redisBus) teardown.add('redis bus', () => redisBus.close());
  return redisBus ?? createEventBus();
}

export interface RealtimeDeps {
  config: Config;
  store: Store;
  upstream: Upstream;
  bus: EventBus;
  merchants: Merchants;
  owners: Owners;
  /** Stores events made from reads in log order, on their condition, and publishes them (the webhooks' AppendBatcher). */
  append(payload: WireWebhookEvent, receivedAt: string, onlyIf: AppendCondition): Promise<AppendResult | NotStored>;
  /** Told of each reconciliation read (a metric). */
  onRead(kind: ReadKind, delayMs: number): void;
  logger: Logger;
}

/** The parts the resolvers and streams use (Services), and /metrics reads. */
export interface Realtime {
  access: ReadAccess;
  reconciler: Reconciler;
  keyWatch: KeyWatch;
  subscriptions: SubscriptionSlots;
  eventPages: EventPages;
  fanout: SubscriptionFanout;
}

export function startRealtime(
  { config, store, upstream, bus, merchants, owners, append, onRead, logger }: RealtimeDeps,
  teardown: Teardown,
): Realtime {
  // The most recent key the upstream accepted for each owner, in this process's memory only: what deliveries nobody
  // follows are read with. Keyed by merchant, as owner records are: a rotated merchant's new key reads what its old one
  // booked.
  const ownerKeys = new OwnerKeys({ resolveOwner: (key) => merchants.of(key) });
  const unwatchKeys = upstream.keys.watch((key, standing) => {
    if (standing === 'accepted') ownerKeys.remember(key);
    else if (standing === 'refused') ownerKeys.forget(key);
  });
  // Each instance reads what its own subscribers follow; an event they hear from any instance puts the read off.
  // Unfinished deliveries nobody follows are read too, at a slower cadence, under a lease per delivery in the store.
  const reconciler = new Reconciler({
    store,
    upstream,
    append,
    intervalMs: config.realtime.reconcileIntervalMs,
    maxReadsPerSecond: config.realtime.reconcileMaxReadsPerSecond,
    finalityGraceMs: config.realtime.finalityGraceMs,
    unfollowedIntervalMs: config.realtime.reconcileUnfollowedIntervalMs,
    unfollowedWindowMs: config.realtime.reconcileUnfollowedWindowMs,
    keys: ownerKeys,
    bus,
    ownerOf: (uid) => owners.lookupOne(uid),
    onRead,
    logger,
  });
  teardown.add('owner keys', () => unwatchKeys());
  teardown.add('reconciler', () => reconciler.stop());
  // Every open subscription's key, re-confirmed at a bounded interval whatever webhooks arrive: a revoked key's streams
  // end.
  const keyWatch = new KeyWatch({ upstream, intervalMs: config.realtime.keyReconfirmIntervalMs, logger });
  teardown.add('key watch', () => keyWatch.stop());
  return {
    access: new ReadAccess(store, upstream, {
      checksPerSubscription: config.realtime.accessChecksPerMinute,
      logger,
      owners,
    }),
    reconciler,
    keyWatch,
    subscriptions: new SubscriptionSlots({
      perKey: config.realtime.subscriptionsPerKey,
      perClientToken: config.realtime.subscriptionsPerClientToken,
      perAddress: config.realtime.subscriptionsPerAddress,
    }),
    eventPages: new EventPages(store),
    fanout: new SubscriptionFanout(),
  };
}

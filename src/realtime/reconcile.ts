// Reconciliation by polling. The upstream sends webhooks only when it was given
// a URL, and retries one at most five times: a subscriber could otherwise wait
// forever on an event that never comes. So each delivery a live subscriber of
// this instance follows is read from the upstream when no event has arrived for
// RECONCILE_INTERVAL_MS: once per delivery whatever its number of subscribers,
// with one of their keys, within RECONCILE_MAX_READS_PER_SECOND for the whole
// instance. A change the read shows is stored and published as the event the
// webhook would have carried (its payload marked `facade_source: "poll"`); a
// webhook of the same milestone arriving later is then a repeat, stored as
// stale. A key the upstream refuses ends its subscriptions UNAUTHENTICATED.
import { NotFoundError, UnauthenticatedError } from '../errors.js';
import { deliveryStatus } from '../domain/status.js';
import { transition } from '../domain/milestones.js';
import type { Logger } from '../logger.js';
import { geoPoint } from '../mapping/delivery.js';
import type { DeliveryStatus } from '../mapping/model.js';
import type { AppendResult, Store } from '../store/store.js';
import type { Upstream } from '../upstream/clients.js';
import type { JsonObject, WireDelivery, WireOrder, WireWebhookEvent, WireWebhookAddress } from '../upstream/wire.js';

/** The marker on payloads the facade made from a read, not received as webhooks. */
export const POLL_SOURCE = 'poll';

/** A read of either group: a platform delivery or a partner order. */
export type DeliveryRead = { group: 'platform'; wire: WireDelivery } | { group: 'partner'; wire: WireOrder };

/** One subscription following a delivery. */
export interface Follower {
  key: string;
  /** Ends the subscription with this error (the key was refused). */
  end(error: Error): void;
}

export interface ReconcilerOptions {
  store: Store;
  upstream: Upstream;
  /** Stores events in log order and publishes the new ones (the webhook receiver's AppendBatcher). */
  append(payload: WireWebhookEvent, receivedAt: string): Promise<AppendResult>;
  /** How long without an event before a followed delivery is read; 0: never. */
  intervalMs: number;
  /** Most reads per second for this instance. */
  maxReadsPerSecond: number;
  logger?: Logger;
}

/** Read by /metrics. */
export interface ReconcileCounters {
  /** Reads made (each one or two upstream calls: platform, then partner). */
  reads: number;
  /** Events stored from reads: what webhooks had not brought. */
  changes: number;
  /** Reads that failed (upstream down, timing out, not found); they back off. */
  errors: number;
  /** Subscriptions ended because the upstream refused their key. */
  refused: number;
}

interface Followed {
  uid: string;
  followers: Set<Follower>;
  /** Which group answered last time, so the other is not asked first. */
  group: 'platform' | 'partner' | undefined;
  /** When the next read is due (ms since the epoch). */
  dueAt: number;
  /** Failed reads in a row: each doubles the wait, up to MAX_BACKOFF. */
  failures: number;
  reading: boolean;
}

/** A read after failures waits at most this many intervals (and never more than 10 minutes). */
const MAX_BACKOFF = 16;
const MAX_BACKOFF_MS = 10 * 60_000;

/** The event name each status is announced with (upstream-api.md, Events); undefined where none is. */
const DELIVERY_EVENT: Partial<Record<DeliveryStatus, string>> = {
  CREATED: 'delivery.created',
  ASSIGNED: 'delivery.assigned',
  PICKUP_ENROUTE: 'delivery.pickup_enroute',
  PICKUP_ARRIVED: 'delivery.pickup_arrived',
  PICKUP_COMPLETE: 'delivery.pickup_complete',
  DROPOFF_ENROUTE: 'delivery.dropoff_enroute',
  DROPOFF_ARRIVED: 'delivery.dropoff_arrived',
  DROPOFF_COMPLETE: 'delivery.dropoff_complete',
  RETURN_IN_PROGRESS: 'delivery.return_in_progress',
  RETURNED: 'delivery.returned',
  CANCELED: 'delivery.canceled',
  FAILED: 'delivery.failed',
};
const LOCATION_EVENT: Partial<Record<DeliveryStatus, string>> = {
  ASSIGNED: 'location.assigned_driver',
  PICKUP_ENROUTE: 'location.pickup_enroute',
  PICKUP_ARRIVED: 'location.pickup_arrived',
  PICKUP_COMPLETE: 'location.pickup_complete',
  DROPOFF_ENROUTE: 'location.dropoff_enroute',
  DROPOFF_ARRIVED: 'location.dropoff_arrived',
  RETURN_IN_PROGRESS: 'location.return_in_progress',
};

const isRefusal = (error: unknown) => (error as { code?: unknown } | undefined)?.code === 'UNAUTHENTICATED';

export class Reconciler {
  readonly counters: ReconcileCounters = { reads: 0, changes: 0, errors: 0, refused: 0 };
  readonly #options: ReconcilerOptions;
  readonly #followed = new Map<string, Followed>();
  readonly #tickMs: number;
  #timer: NodeJS.Timeout | undefined;
  #tokens = 0;
  #lastTick = Date.now();

  constructor(options: ReconcilerOptions) {
    this.#options = options;
    // Ticks a tenth of the interval apart: a read is late by at most that.
    this.#tickMs = Math.min(1_000, Math.max(20, Math.floor(options.intervalMs / 10)));
  }

  /** Deliveries followed by at least one live subscriber of this instance. */
  get followedCount(): number {
    return this.#followed.size;
  }

  get enabled(): boolean {
    return this.#options.intervalMs > 0;
  }

  /**
   * Reads the delivery with the key, as a subscription starts: the upstream's
   * word that the key is still valid, and a fresh state. A refused key rejects
   * UNAUTHENTICATED. Any other failure (upstream down, not found) resolves
   * undefined: the stored state stands and reconciliation reads again later.
   * The read is not stored: a store behind it may only have webhooks on their
   * way, and a read stored first would make them stale. Reconciliation stores
   * what is still missing once no event has come for an interval.
   */
  async confirm(key: string, uid: string): Promise<DeliveryRead | undefined> {
    let read: DeliveryRead;
    try {
      read = await this.#read(key, uid, undefined);
    } catch (error) {
      if (isRefusal(error)) throw error;
      this.#options.logger?.debug({ err: error, uid }, 'reconcile: the read at subscription start failed; the stored state stands');
      return undefined;
    }
    return read;
  }

  /**
   * The upstream's word on a key not bound to one delivery (deliveryEvents without
   * uids): the platform's availability, then the partner group's; refused only
   * when both refuse it. Other failures let it through.
   */
  async confirmKey(key: string): Promise<void> {
    const { upstream } = this.#options;
    let refusals = 0;
    for (const check of [() => upstream.platform.availability(key), () => upstream.partner.availability(key)]) {
      try {
        await check();
        return;
      } catch (error) {
        if (!isRefusal(error)) return;
        refusals += 1;
      }
    }
    if (refusals === 2) throw new UnauthenticatedError('The delivery service refused the merchant key.');
  }

  /** Follows the delivery for one subscription until the returned function is called. */
  follow(uid: string, follower: Follower): () => void {
    let followed = this.#followed.get(uid);
    if (!followed) {
      followed = { uid, followers: new Set(), group: undefined, dueAt: this.#nextDue(), failures: 0, reading: false };
      this.#followed.set(uid, followed);
    }
    followed.followers.add(follower);
    this.#start();
    const entry = followed;
    return () => {
      entry.followers.delete(follower);
      if (entry.followers.size === 0 && this.#followed.get(uid) === entry) this.#followed.delete(uid);
    };
  }

  /** Any event of a followed delivery (a webhook, from any instance) puts its next read off by an interval. */
  heard(uid: string): void {
    const followed = this.#followed.get(uid);
    if (followed && !followed.reading) followed.dueAt = this.#nextDue();
  }

  stop(): void {
    clearInterval(this.#timer);
    this.#timer = undefined;
    this.#followed.clear();
  }

  /** An interval from now, plus up to a fifth more so reads spread out instead of coming in waves. */
  #nextDue(intervals = 1): number {
    const ms = Math.min(this.#options.intervalMs * intervals, Math.max(MAX_BACKOFF_MS, this.#options.intervalMs));
    return Date.now() + ms * (1 + Math.random() * 0.2);
  }

  #start(): void {
    if (this.#timer || !this.enabled) return;
    this.#lastTick = Date.now();
    this.#timer = setInterval(() => this.#tick(), this.#tickMs);
    this.#timer.unref();
  }

  /** Reads what is due, oldest due first, as far as the rate allows (a token bucket of one second's reads). */
  #tick(): void {
    if (this.#followed.size === 0) {
      clearInterval(this.#timer);
      this.#timer = undefined;
      return;
    }
    const now = Date.now();
    const rate = this.#options.maxReadsPerSecond;
    this.#tokens = Math.min(rate, this.#tokens + ((now - this.#lastTick) * rate) / 1000);
    this.#lastTick = now;
    if (this.#tokens < 1) return;
    for (const followed of oldestDue(this.#followed.values(), now, Math.floor(this.#tokens))) {
      this.#tokens -= 1;
      void this.#reconcile(followed);
    }
  }

  async #reconcile(followed: Followed): Promise<void> {
    const follower = followed.followers.values().next().value;
    if (!follower) return;
    followed.reading = true;
    this.counters.reads += 1;
    try {
      const read = await this.#read(follower.key, followed.uid, followed.group);
      followed.group = read.group;
      followed.failures = 0;
      await this.#apply(followed.uid, read);
      followed.dueAt = this.#nextDue();
    } catch (error) {
      if (isRefusal(error)) {
        this.#refuse(follower.key, error as Error);
        // Another subscriber's key may read it at the next tick.
        followed.dueAt = Date.now();
      } else {
        this.counters.errors += 1;
        followed.failures += 1;
        followed.dueAt = this.#nextDue(Math.min(2 ** followed.failures, MAX_BACKOFF));
        this.#options.logger?.warn({ err: error, uid: followed.uid, failures: followed.failures }, 'reconcile: reading a followed delivery failed; trying again later');
      }
    } finally {
      followed.reading = false;
    }
  }

  /** Ends every subscription of this instance that follows a delivery with the refused key. */
  #refuse(key: string, error: Error): void {
    for (const followed of this.#followed.values()) {
      for (const follower of [...followed.followers]) {
        if (follower.key !== key) continue;
        this.counters.refused += 1;
        followed.followers.delete(follower);
        follower.end(error);
      }
      if (followed.followers.size === 0) this.#followed.delete(followed.uid);
    }
  }

  /**
   * Platform read, then partner (or the group that answered last time first).
   * A key may be valid for one group only: it is refused when both refuse it,
   * or when one refuses it and the other does not know the delivery.
   */
  async #read(key: string, uid: string, group: 'platform' | 'partner' | undefined): Promise<DeliveryRead> {
    const { upstream } = this.#options;
    const platform = async (): Promise<DeliveryRead> => ({ group: 'platform', wire: await upstream.platform.get(key, uid) });
    const partner = async (): Promise<DeliveryRead> => ({ group: 'partner', wire: await upstream.partner.getOrder(key, uid) });
    const [first, second] = group === 'partner' ? [partner, platform] : [platform, partner];
    let firstError: unknown;
    try {
      return await first();
    } catch (error) {
      if (!(error instanceof NotFoundError) && !isRefusal(error)) throw error;
      firstError = error;
    }
    try {
      return await second();
    } catch (error) {
      throw error instanceof NotFoundError && isRefusal(firstError) ? firstError : error;
    }
  }

  /**
   * Stores what the read shows that the store does not have yet: its milestone,
   * when the store's rule lets it move the state, and the courier's position
   * when it is new.
   */
  async #apply(uid: string, read: DeliveryRead): Promise<void> {
    const { store } = this.#options;
    const status = deliveryStatus(read.wire.status);
    const events: WireWebhookEvent[] = [];
    const state = await store.deliveryState(uid);
    const name = DELIVERY_EVENT[status];
    const step = name ? transition(state, name) : undefined;
    if (name && step && !step.stale && step.state !== state) events.push(eventFromRead(read, name));
    const locationName = LOCATION_EVENT[status];
    const position = geoPoint(read.wire.driver_location);
    if (!step?.state?.terminal && locationName && position && events.length === 0) {
      const latest = await store.latestEvent(uid, 'location');
      const last = latest && geoPoint(latest.payload.driver_location);
      const moved = !last || last.lat !== position.lat || last.lng !== position.lng || latest.payload.driver_id !== read.wire.driver_id;
      if (moved && !transition(state, locationName).stale) events.push(eventFromRead(read, locationName));
    }
    const receivedAt = new Date().toISOString();
    const results = await Promise.all(events.map((event) => this.#options.append(event, receivedAt)));
    for (const result of results) if (!result.duplicate && !result.event.stale) this.counters.changes += 1;
  }
}

/**
 * The `count` followed deliveries due longest, oldest first, without sorting
 * every due one: with the reads behind (thousands due at each tick) a sort held
 * the loop for milliseconds each tick. A max-heap of `count` (at most one
 * second's reads) keeps the oldest seen so far.
 */
function oldestDue(followed: Iterable<Followed>, now: number, count: number): Followed[] {
  const heap: Followed[] = [];
  const later = (i: number, j: number) => heap[i]!.dueAt > heap[j]!.dueAt;
  const swap = (i: number, j: number) => ([heap[i], heap[j]] = [heap[j]!, heap[i]!]);
  for (const entry of followed) {
    if (entry.reading || entry.dueAt > now) continue;
    if (heap.length === count) {
      // Not older than the latest kept: skipped; else it replaces it.
      if (count === 0 || entry.dueAt >= heap[0]!.dueAt) continue;
      heap[0] = entry;
      for (let i = 0; ; ) {
        const [left, right] = [2 * i + 1, 2 * i + 2];
        let top = i;
        if (left < heap.length && later(left, top)) top = left;
        if (right < heap.length && later(right, top)) top = right;
        if (top === i) break;
        swap(i, top);
        i = top;
      }
      continue;
    }
    heap.push(entry);
    for (let i = heap.length - 1; i > 0 && later(i, (i - 1) >> 1); i = (i - 1) >> 1) swap(i, (i - 1) >> 1);
  }
  return heap.sort((a, b) => a.dueAt - b.dueAt);
}

const ADDRESS_FIELDS = ['street', 'number', 'secondary_number', 'city', 'county', 'state', 'postal_code', 'country', 'latitude', 'longitude'] as const;

/** A read's flat address fields, nested as a webhook carries them; omitted when empty. */
function nestedAddress(wire: JsonObject, side: 'pickup' | 'dropoff'): WireWebhookAddress | undefined {
  const address: JsonObject = {};
  for (const field of ADDRESS_FIELDS) {
    const value = wire[`${side}_address_${field}`];
    if (value !== undefined && value !== null) address[field] = value;
  }
  return Object.keys(address).length > 0 ? (address as WireWebhookAddress) : undefined;
}

const WEBHOOK_FIELDS = [
  'status', 'price', 'distance', 'tip', 'pickup_name', 'pickup_phone_number', 'pickup_instructions', 'email',
  'dropoff_name', 'dropoff_phone_number', 'dropoff_instructions', 'driver_id', 'driver_name', 'driver_location',
  'driver_pickup_phone_number', 'driver_dropoff_phone_number', 'driver_vehicle_make', 'driver_vehicle_model', 'driver_vehicle_year',
  'dropoff_time_estimated', 'pickup_start_time', 'dropoff_start_time', 'delivery_start_time', 'delivery_end_time',
  'package_description', 'package_minimum_vehicle_size', 'package_delivery_mode', 'package_requirements', 'package_value',
  'items_count', 'items', 'weight', 'dropoff_verification_image_url', 'dropoff_signature_image_url', 'cancellation_reason',
  'platform_payload', 'partner_reference', 'partner_payload',
] as const;

/** The event the webhook would have carried, from a read: the documented body's fields the read has, marked as polled. */
export function eventFromRead(read: DeliveryRead, eventName: string): WireWebhookEvent {
  const wire = read.wire as unknown as JsonObject;
  const event: JsonObject = { uid: read.wire.uid, event_name: eventName };
  for (const field of WEBHOOK_FIELDS) {
    if (wire[field] !== undefined && wire[field] !== null) event[field] = wire[field];
  }
  // A webhook's delivery_date is a plain date; a read's is a datetime.
  if (typeof wire.delivery_date === 'string') event.delivery_date = wire.delivery_date.slice(0, 10);
  const pickup = nestedAddress(wire, 'pickup');
  const dropoff = nestedAddress(wire, 'dropoff');
  if (pickup) event.pickup_address = pickup as unknown as JsonObject;
  if (dropoff) event.dropoff_address = dropoff as unknown as JsonObject;
  event.facade_source = POLL_SOURCE;
  return event as unknown as WireWebhookEvent;
}

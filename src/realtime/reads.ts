// A delivery read from the upstream, and what reconciliation stores of it: the event the webhook would have carried
// (marked as polled, with the log position the read was made at), stored only where the store's verdict lets it
// (AppendCondition), and the read merged into the delivery's view (src/domain/delivery-view.ts).
import { NotFoundError } from '../errors.js';
import { deliveryStatus } from '../domain/status.js';
import {
  awaitsConfirmation,
  isDeliveryEvent,
  milestoneRank,
  NOT_DELIVERED_RANK,
  POLL_SOURCE,
  statusRank,
} from '../domain/milestones.js';
import { geoPoint } from '../mapping/delivery.js';
import type { DeliveryStatus } from '../mapping/model.js';
import type { AppendCondition, AppendResult, NotStored, Store, StoredEvent } from '../store/store.js';
import type { Upstream } from '../upstream/clients.js';
import type { JsonObject, WireDelivery, WireOrder, WireWebhookEvent, WireWebhookAddress } from '../upstream/wire.js';

/**
 * Why a delivery is read: it is followed and no event came for an interval; it
 * is not followed and its pass came; an event contradicted its state; or the
 * grace of its cancel or failure ended.
 */
export type ReadKind = 'followed' | 'unfollowed' | 'contradiction' | 'confirmation';

/**
 * Within one owner's turn, the most urgent first; followed and unfollowed by lateness for their cadence
 * (src/realtime/fair-reads.ts).
 */
export const READ_PRIORITY: Record<ReadKind, number> = {
  contradiction: 0,
  confirmation: 1,
  followed: 2,
  unfollowed: 2,
};

/** A read after failures waits at most this many intervals (and never more than 10 minutes). */
export const MAX_BACKOFF = 16;

/** When a cancel or failure event's grace ends (ms since the epoch); undefined for any other event, or a stale one. */
export function graceEndOf(event: StoredEvent, graceMs: number): number | undefined {
  if (event.stale || !isDeliveryEvent(event.name) || milestoneRank(event.name) !== NOT_DELIVERED_RANK) return undefined;
  return Date.parse(event.receivedAt) + graceMs;
}

/** A read of either group: a platform delivery or a partner order. */
export type DeliveryRead = { group: 'platform'; wire: WireDelivery } | { group: 'partner'; wire: WireOrder };

/** What a read found that the caller may act on. */
export interface ReadOutcome {
  /**
   * The delivery awaits the confirmation of a cancel or failure: a read from then on may confirm it (ms since the
   * epoch).
   */
  confirmAt?: number;
}

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

export const isRefusal = (error: unknown) => (error as { code?: unknown } | undefined)?.code === 'UNAUTHENTICATED';

/** What storing a read needs: the store, the conditional append (the batcher's), the grace, and a count of changes. */
export interface ReadStoring {
  store: Store;
  append(payload: WireWebhookEvent, receivedAt: string, onlyIf: AppendCondition): Promise<AppendResult | NotStored>;
  finalityGraceMs: number;
  /** Told of each event stored from a read as a change. */
  changed(): void;
}

/**
 * Platform read, then partner (or the group that answered last time first).
 * A key may be valid for one group only: it is refused when both refuse it,
 * or when one refuses it and the other does not know the delivery.
 */
export async function readDelivery(
  upstream: Upstream,
  key: string,
  uid: string,
  group: 'platform' | 'partner' | undefined,
): Promise<DeliveryRead> {
  const platform = async (): Promise<DeliveryRead> => ({
    group: 'platform',
    wire: await upstream.platform.get(key, uid),
  });
  const partner = async (): Promise<DeliveryRead> => ({
    group: 'partner',
    wire: await upstream.partner.getOrder(key, uid),
  });
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
 * Stores what a read (made when the log's last seq was `basis`) shows that the
 * store does not have: its milestone, where the rule lets the read move the
 * state (forward; or past an end it contradicts; or confirming a cancel or
 * failure once its grace has passed), and the courier's position when it is
 * new; then merges the read into the delivery's view. At a subscription's
 * start only what the read decides is stored (it contradicts a final state, or
 * confirms one): a read merely ahead of the store may have webhooks on their
 * way, and stored first it would make them stale.
 */
export async function applyRead(
  deps: ReadStoring,
  {
    uid,
    read,
    basis,
    atStart,
    readAt,
  }: { uid: string; read: DeliveryRead; basis: number; atStart?: boolean; readAt?: number },
): Promise<ReadOutcome> {
  const { store, append, finalityGraceMs } = deps;
  const status = deliveryStatus(read.wire.status);
  const state = await store.deliveryState(uid);
  const outcome: ReadOutcome = {};
  const receivedAt = new Date().toISOString();
  const name = DELIVERY_EVENT[status];
  let stored = false;
  if (name) {
    let confirm = false;
    if (awaitsConfirmation(state) && statusRank(status) === state!.rank) {
      outcome.confirmAt = (await movedAt(store, uid, state!.seq!)) + finalityGraceMs;
      confirm = Date.now() >= outcome.confirmAt;
    }
    // The store judges the read as it judges any event; at a subscription's start only what it decides is stored.
    const event = eventFromRead(read, name, { basis, confirm });
    const result = await append(event, receivedAt, atStart ? 'decisive' : 'accepted');
    stored = changed(deps, result);
    if (stored && 'event' in result && result.event.moved) {
      const after = await store.deliveryState(uid);
      if (awaitsConfirmation(after)) outcome.confirmAt = Date.now() + finalityGraceMs;
      if (after?.terminal) delete outcome.confirmAt;
    }
  }
  const locationName = LOCATION_EVENT[status];
  const position = geoPoint(read.wire.driver_location);
  if (!atStart && !stored && !state?.terminal && locationName && position) {
    const latest = await store.latestEvent(uid, 'location');
    const last = latest && geoPoint(latest.payload.driver_location);
    const moved =
      !last ||
      last.lat !== position.lat ||
      last.lng !== position.lng ||
      latest.payload.driver_id !== read.wire.driver_id;
    if (moved)
      changed(deps, await append(eventFromRead(read, locationName, { basis, confirm: false }), receivedAt, 'accepted'));
  }
  await store.recordRead({ uid, body: readBody(read), basis, readAt });
  return outcome;
}

/** Whether a read's event was stored as a change (not skipped, not a duplicate, not stale); counted. */
function changed(deps: ReadStoring, result: AppendResult | NotStored): boolean {
  if (!('event' in result) || result.duplicate || result.event.stale) return false;
  deps.changed();
  return true;
}

/** When the event that last moved the state was received (ms since the epoch); 0 when it is no longer stored. */
async function movedAt(store: Store, uid: string, seq: number): Promise<number> {
  const [mover] = await store.eventsAfter(seq - 1, 1, { uids: [uid] });
  return mover?.seq === seq ? Date.parse(mover.receivedAt) : 0;
}

const ADDRESS_FIELDS = [
  'street',
  'number',
  'secondary_number',
  'city',
  'county',
  'state',
  'postal_code',
  'country',
  'latitude',
  'longitude',
] as const;

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
  'status',
  'price',
  'distance',
  'tip',
  'pickup_name',
  'pickup_phone_number',
  'pickup_instructions',
  'email',
  'dropoff_name',
  'dropoff_phone_number',
  'dropoff_instructions',
  'driver_id',
  'driver_name',
  'driver_location',
  'driver_pickup_phone_number',
  'driver_dropoff_phone_number',
  'driver_vehicle_make',
  'driver_vehicle_model',
  'driver_vehicle_year',
  'dropoff_time_estimated',
  'pickup_start_time',
  'dropoff_start_time',
  'delivery_start_time',
  'delivery_end_time',
  'package_description',
  'package_minimum_vehicle_size',
  'package_delivery_mode',
  'package_requirements',
  'package_value',
  'items_count',
  'items',
  'weight',
  'dropoff_verification_image_url',
  'dropoff_signature_image_url',
  'cancellation_reason',
  'platform_payload',
  'partner_reference',
  'partner_payload',
] as const;

/**
 * The event the webhook would have carried, from a read: the documented body's
 * fields the read has, marked as polled, with the log position the read was
 * made at and whether it confirms a cancel or failure (see readFactsOf).
 */
export function eventFromRead(
  read: DeliveryRead,
  eventName: string,
  made: { basis: number; confirm: boolean },
): WireWebhookEvent {
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
  event.facade_read_basis = made.basis;
  if (made.confirm) event.facade_confirms = true;
  return event as unknown as WireWebhookEvent;
}

/**
 * A read for the delivery's view: the event it would make, with what only reads
 * carry (tracking link, style, fees, dimensions, the scheduled datetime).
 */
export function readBody(read: DeliveryRead): JsonObject {
  const wire = read.wire as unknown as JsonObject;
  const body = eventFromRead(read, 'snapshot', { basis: 0, confirm: false }) as unknown as JsonObject;
  for (const field of READ_ONLY_FIELDS)
    if (wire[field] !== undefined && wire[field] !== null) body[field] = wire[field];
  return body;
}

/** What a read has and a webhook body does not (each group's spelling, read as such by fromWebhookEvent). */
const READ_ONLY_FIELDS = [
  'tracking_link',
  'tracking_url',
  'delivery_style',
  'expected_cancellation_fee',
  'expected_cancelation_fee',
  'dimensions',
  'dimentions',
  'delivery_date',
] as const;

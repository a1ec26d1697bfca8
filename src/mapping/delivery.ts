// Platform Delivery, partner Order and webhook body → the one Delivery model.
// The three differ in spelling (dimentions, tracking_url, expected_cancelation_fee,
// partner_payload) and in address layout (flat `pickup_address_*` on reads,
// nested `pickup_address` objects on webhooks).
import type { JsonObject, WireDelivery, WireOrder, WireWebhookAddress, WireWebhookEvent } from '../upstream/wire.js';
import type { Address, ApiGroup, Courier, Delivery, Item, Money, Package, Stop } from './model.js';
import { calendarDate, decimalFrom, int, isJsonObject, num, str, utcDateTime } from './scalars.js';
import { deliveryStatus, statusOfWebhook } from '../domain/status.js';
import { courierIdentity, statusRank } from '../domain/milestones.js';
import { deliveryMode, deliveryStyle } from './status.js';
import { withoutMarker } from '../domain/booking-marker.js';

type Loose = Record<string, unknown>;

/**
 * Where one stop's fields are in a read or webhook body: the same names with `pickup_` or `dropoff_`, written out once.
 */
interface StopKeys {
  name: string;
  phone: string;
  email: string;
  instructions: string;
  startTime: string;
  /** The flat address of a read: `pickup_address_street` and so on. */
  address: Record<keyof Address, string>;
}

const PICKUP: StopKeys = {
  name: 'pickup_name',
  phone: 'pickup_phone_number',
  email: 'email',
  instructions: 'pickup_instructions',
  startTime: 'pickup_start_time',
  address: {
    street: 'pickup_address_street',
    number: 'pickup_address_number',
    secondaryNumber: 'pickup_address_secondary_number',
    city: 'pickup_address_city',
    county: 'pickup_address_county',
    state: 'pickup_address_state',
    postalCode: 'pickup_address_postal_code',
    country: 'pickup_address_country',
    latitude: 'pickup_address_latitude',
    longitude: 'pickup_address_longitude',
  },
};

const DROPOFF: StopKeys = {
  name: 'dropoff_name',
  phone: 'dropoff_phone_number',
  email: 'dropoff_email',
  instructions: 'dropoff_instructions',
  startTime: 'dropoff_start_time',
  address: {
    street: 'dropoff_address_street',
    number: 'dropoff_address_number',
    secondaryNumber: 'dropoff_address_secondary_number',
    city: 'dropoff_address_city',
    county: 'dropoff_address_county',
    state: 'dropoff_address_state',
    postalCode: 'dropoff_address_postal_code',
    country: 'dropoff_address_country',
    latitude: 'dropoff_address_latitude',
    longitude: 'dropoff_address_longitude',
  },
};

export function fromPlatformDelivery(wire: WireDelivery): Delivery {
  const raw = wire as unknown as Loose;
  return deliveryOf(raw, 'PLATFORM', {
    status: deliveryStatus(raw.status),
    pickupAddress: flatAddress(raw, PICKUP),
    dropoffAddress: flatAddress(raw, DROPOFF),
    dimensions: raw.dimensions,
    trackingUrl: str(raw.tracking_link),
    expectedCancellationFee: amountMoney(raw.expected_cancellation_fee),
    payload: withoutMarker(raw.platform_payload) ?? null,
    partnerReference: null,
  });
}

export function fromPartnerOrder(wire: WireOrder): Delivery {
  const raw = wire as unknown as Loose;
  return deliveryOf(raw, 'PARTNER', {
    status: deliveryStatus(raw.status),
    pickupAddress: flatAddress(raw, PICKUP),
    dropoffAddress: flatAddress(raw, DROPOFF),
    dimensions: raw.dimentions ?? raw.dimensions,
    trackingUrl: str(raw.tracking_url ?? raw.tracking_link),
    expectedCancellationFee: amountMoney(raw.expected_cancelation_fee ?? raw.expected_cancellation_fee),
    payload: raw.partner_payload ?? null,
    partnerReference: str(raw.partner_reference),
  });
}

/**
 * A webhook body describes the delivery as of that event. Its group is not in
 * the body (the document lists the same fields for every event): the caller
 * gives it, from what the facade knows of the uid (src/access/owners.ts). Its
 * status is the milestone of `event_name`, not the human-readable `status` label.
 */
export function fromWebhookEvent(wire: WireWebhookEvent, group: ApiGroup = 'PLATFORM'): Delivery {
  const raw = wire as unknown as Loose;
  const partner = group === 'PARTNER';
  return deliveryOf(raw, group, {
    // The event's name says where the delivery stands; `status` stays as rawStatus.
    status: statusOfWebhook(raw.event_name, raw.status),
    pickupAddress: nestedAddress(raw.pickup_address),
    dropoffAddress: nestedAddress(raw.dropoff_address),
    dimensions: raw.dimensions ?? raw.dimentions,
    trackingUrl: str(raw.tracking_link ?? raw.tracking_url),
    expectedCancellationFee: amountMoney(raw.expected_cancellation_fee ?? raw.expected_cancelation_fee),
    // The document's body has platform_payload on every event; an upstream that adds a partner order's own fields is
    // read too.
    payload:
      (partner ? (raw.partner_payload ?? withoutMarker(raw.platform_payload)) : withoutMarker(raw.platform_payload)) ??
      null,
    partnerReference: str(raw.partner_reference),
  });
}

/**
 * The delivery as the facade knows it after an event (src/domain/delivery-view.ts):
 * a webhook body merged over earlier events and reads, read as a webhook body
 * is. A read's scheduled datetime (scheduled_at) stands while the body's date is
 * that same UTC day: a webhook's plain date does not take the time of day away.
 */
export function fromDeliveryView(view: JsonObject, group: ApiGroup = 'PLATFORM'): Delivery {
  const scheduled = utcDateTime(view.scheduled_at);
  const keepDate =
    scheduled === null ||
    view.delivery_date === scheduled ||
    calendarDate(view.delivery_date) !== scheduled.slice(0, 10);
  const delivery = fromWebhookEvent(
    (keepDate ? view : { ...view, delivery_date: scheduled }) as unknown as WireWebhookEvent,
    group,
  );
  // The fee is "if cancelled now", and a merchant may cancel only before pickup: past it, or at an end, an earlier
  // read's fee is no longer true.
  return cancelable(delivery.status) ? delivery : { ...delivery, expectedCancellationFee: null };
}

const PICKUP_RANK = statusRank('PICKUP_COMPLETE')!;

/** Before pickup (the document's cancel rule); a status the facade does not rank is left as the upstream said. */
function cancelable(status: Delivery['status']): boolean {
  const rank = statusRank(status);
  return rank === undefined || rank < PICKUP_RANK;
}

/** What the three bodies spell or lay out differently, read by each from-function. */
interface Differences {
  status: Delivery['status'];
  pickupAddress: Address | null;
  dropoffAddress: Address | null;
  dimensions: unknown;
  trackingUrl: string | null;
  expectedCancellationFee: Money | null;
  payload: unknown;
  partnerReference: string | null;
}

/** One object literal for all three, so every Delivery has the same shape. */
function deliveryOf(raw: Loose, group: ApiGroup, differences: Differences): Delivery {
  const distance = isJsonObject(raw.distance) ? raw.distance : undefined;
  const distanceValue = num(distance?.value);
  const photoUrl = str(raw.dropoff_verification_image_url);
  const signatureUrl = str(raw.dropoff_signature_image_url);
  // A read's delivery_date is a full datetime: its time of day is kept in scheduledAt (a webhook's plain date has
  // none).
  const scheduledAt =
    typeof raw.delivery_date === 'string' && raw.delivery_date.includes('T') ? utcDateTime(raw.delivery_date) : null;
  return {
    uid: String(raw.uid),
    group,
    status: differences.status,
    rawStatus: str(raw.status),
    // `price.value` is null until pricing settles.
    price: valueMoney(raw.price),
    tip: decimalFrom(raw.tip),
    distance: distanceValue !== null ? { value: distanceValue, unit: str(distance?.unit) } : null,
    pickup: stop(raw, PICKUP, differences.pickupAddress),
    dropoff: stop(raw, DROPOFF, differences.dropoffAddress),
    // The date of scheduledAt when there is one: the same text is not read twice.
    deliveryDate: scheduledAt !== null ? scheduledAt.slice(0, 10) : calendarDate(raw.delivery_date),
    scheduledAt,
    deliveryStartTime: utcDateTime(raw.delivery_start_time),
    deliveryEndTime: utcDateTime(raw.delivery_end_time),
    estimatedDropoffAt: utcDateTime(raw.dropoff_time_estimated),
    mode: deliveryMode(raw.package_delivery_mode),
    style: deliveryStyle(raw.delivery_style),
    rawStyle: str(raw.delivery_style),
    package: packageOf(raw, differences.dimensions),
    courier: courier(raw),
    proofOfDelivery: photoUrl || signatureUrl ? { photoUrl, signatureUrl } : null,
    cancellationReason: str(raw.cancellation_reason),
    expectedCancellationFee: differences.expectedCancellationFee,
    trackingUrl: differences.trackingUrl,
    payload: differences.payload,
    partnerReference: differences.partnerReference,
  };
}

function stop(raw: Loose, keys: StopKeys, address: Address | null): Stop {
  return {
    name: str(raw[keys.name]),
    phone: str(raw[keys.phone]),
    email: str(raw[keys.email]),
    instructions: str(raw[keys.instructions]),
    address,
    windowStart: utcDateTime(raw[keys.startTime]),
  };
}

function flatAddress(raw: Loose, { address: keys }: StopKeys): Address | null {
  return addressOrNull({
    street: str(raw[keys.street]),
    number: str(raw[keys.number]),
    secondaryNumber: str(raw[keys.secondaryNumber]),
    city: str(raw[keys.city]),
    county: str(raw[keys.county]),
    state: str(raw[keys.state]),
    postalCode: str(raw[keys.postalCode]),
    country: str(raw[keys.country]),
    latitude: num(raw[keys.latitude]),
    longitude: num(raw[keys.longitude]),
  });
}

function nestedAddress(value: unknown): Address | null {
  if (!isJsonObject(value)) return null;
  const wire = value as WireWebhookAddress & Loose;
  return addressOrNull({
    street: str(wire.street),
    number: str(wire.number),
    secondaryNumber: str(wire.secondary_number),
    city: str(wire.city),
    county: str(wire.county),
    state: str(wire.state),
    postalCode: str(wire.postal_code),
    country: str(wire.country),
    latitude: num(wire.latitude),
    longitude: num(wire.longitude),
  });
}

function addressOrNull(address: Address): Address | null {
  for (const key in address) if (address[key as keyof Address] !== null) return address;
  return null;
}

function courier(raw: Loose): Courier | null {
  const location = geoPoint(raw.driver_location);
  const vehicle = {
    make: str(raw.driver_vehicle_make),
    model: str(raw.driver_vehicle_model),
    year: int(raw.driver_vehicle_year),
  };
  const hasVehicle = vehicle.make !== null || vehicle.model !== null || vehicle.year !== null;
  const result: Courier = {
    id: courierIdentity(raw)?.id ?? null,
    name: str(raw.driver_name),
    pickupPhone: str(raw.driver_pickup_phone_number),
    dropoffPhone: str(raw.driver_dropoff_phone_number),
    vehicle: hasVehicle ? vehicle : null,
    location,
  };
  // No courier until one is assigned: every courier field empty means none.
  return result.id || result.name || result.pickupPhone || result.dropoffPhone || hasVehicle || location
    ? result
    : null;
}

export function geoPoint(value: unknown): { lat: number; lng: number } | null {
  if (!isJsonObject(value)) return null;
  const lat = num(value.lat);
  const lng = num(value.lng);
  return lat === null || lng === null ? null : { lat, lng };
}

function packageOf(raw: Loose, dimensions: unknown): Package {
  const requirements = Array.isArray(raw.package_requirements)
    ? raw.package_requirements.filter((r): r is string => typeof r === 'string')
    : [];
  const dims = isJsonObject(dimensions)
    ? { height: num(dimensions.height), length: num(dimensions.length), width: num(dimensions.width) }
    : null;
  return {
    description: str(raw.package_description),
    minimumVehicleSize: str(raw.package_minimum_vehicle_size),
    requirements,
    itemsCount: int(raw.items_count),
    items: Array.isArray(raw.items) ? raw.items.filter(isJsonObject).map(item) : null,
    weight: num(raw.weight),
    dimensions: dims && (dims.height !== null || dims.length !== null || dims.width !== null) ? dims : null,
    declaredValue: decimalFrom(raw.package_value),
  };
}

/** An item's keys as the document lists them (request and read); the rest is kept in `extra`. */
const ITEM_KEYS = new Set([
  'name',
  'quantity',
  'description',
  'external_id',
  'external_instance_id',
  'price',
  'barcode',
]);

function item(raw: Loose): Item {
  let extra: Record<string, unknown> | null = null;
  for (const key of Object.keys(raw)) {
    if (ITEM_KEYS.has(key)) continue;
    extra ??= {};
    extra[key] = raw[key];
  }
  return {
    name: str(raw.name),
    quantity: num(raw.quantity),
    description: str(raw.description),
    externalId: str(raw.external_id),
    externalInstanceId: str(raw.external_instance_id),
    price: decimalFrom(raw.price),
    barcode: str(raw.barcode),
    extra,
  };
}

/** `{amount: "2.50", currency}` (decimal string) → Money. */
export function amountMoney(value: unknown): Money | null {
  return isJsonObject(value) ? money(value.amount, value.currency) : null;
}

/** `{value: 2.5, currency}` (number) → Money. */
export function valueMoney(value: unknown): Money | null {
  return isJsonObject(value) ? money(value.value, value.currency) : null;
}

/** An amount is Money only with its currency: without one it is no amount a client can show (null, never ""). */
function money(amount: unknown, currency: unknown): Money | null {
  const decimal = decimalFrom(amount);
  const code = str(currency);
  return decimal === null || code === null ? null : { amount: decimal, currency: code };
}

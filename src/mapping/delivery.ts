// Platform Delivery, partner Order and webhook body → the one Delivery model.
// The three differ in spelling (dimentions, tracking_url, expected_cancelation_fee,
// partner_payload) and in address layout (flat `pickup_address_*` on reads,
// nested `pickup_address` objects on webhooks).
import type { WireDelivery, WireOrder, WireWebhookAddress, WireWebhookEvent } from '../upstream/wire.js';
import type { Address, ApiGroup, Courier, Delivery, Item, Money, Package, Stop } from './model.js';
import { calendarDate, decimalFrom, int, isJsonObject, num, str, utcDateTime } from './scalars.js';
import { deliveryStatus, statusOfWebhook } from '../domain/status.js';
import { courierIdentity } from '../domain/milestones.js';
import { deliveryMode, deliveryStyle } from './status.js';
import { withoutMarker } from '../domain/booking-marker.js';

type Side = 'pickup' | 'dropoff';
type Loose = Record<string, unknown>;

export function fromPlatformDelivery(wire: WireDelivery): Delivery {
  const raw = wire as unknown as Loose;
  return {
    ...common(raw, 'PLATFORM', flatAddress(raw, 'pickup'), flatAddress(raw, 'dropoff')),
    package: packageOf(raw, raw.dimensions),
    trackingUrl: str(raw.tracking_link),
    expectedCancellationFee: amountMoney(raw.expected_cancellation_fee),
    payload: withoutMarker(raw.platform_payload) ?? null,
    partnerReference: null,
    deliveryStartTime: utcDateTime(raw.delivery_start_time),
  };
}

export function fromPartnerOrder(wire: WireOrder): Delivery {
  const raw = wire as unknown as Loose;
  return {
    ...common(raw, 'PARTNER', flatAddress(raw, 'pickup'), flatAddress(raw, 'dropoff')),
    package: packageOf(raw, raw.dimentions ?? raw.dimensions),
    trackingUrl: str(raw.tracking_url ?? raw.tracking_link),
    expectedCancellationFee: amountMoney(raw.expected_cancelation_fee ?? raw.expected_cancellation_fee),
    payload: raw.partner_payload ?? null,
    partnerReference: str(raw.partner_reference),
    deliveryStartTime: utcDateTime(raw.delivery_start_time),
  };
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
  return {
    ...common(raw, group, nestedAddress(raw.pickup_address), nestedAddress(raw.dropoff_address)),
    // The event's name says where the delivery stands; `status` stays as rawStatus.
    status: statusOfWebhook(raw.event_name, raw.status),
    package: packageOf(raw, raw.dimensions ?? raw.dimentions),
    trackingUrl: str(raw.tracking_link ?? raw.tracking_url),
    expectedCancellationFee: amountMoney(raw.expected_cancellation_fee ?? raw.expected_cancelation_fee),
    // The document's body has platform_payload on every event; an upstream that adds a partner order's own fields is read too.
    payload: (partner ? (raw.partner_payload ?? withoutMarker(raw.platform_payload)) : withoutMarker(raw.platform_payload)) ?? null,
    partnerReference: str(raw.partner_reference),
    deliveryStartTime: utcDateTime(raw.delivery_start_time),
  };
}

type CommonPart = Omit<Delivery, 'package' | 'trackingUrl' | 'expectedCancellationFee' | 'payload' | 'partnerReference' | 'deliveryStartTime'>;

function common(raw: Loose, group: ApiGroup, pickupAddress: Address | null, dropoffAddress: Address | null): CommonPart {
  const price = isJsonObject(raw.price) ? raw.price : undefined;
  const priceAmount = decimalFrom(price?.value);
  const distance = isJsonObject(raw.distance) ? raw.distance : undefined;
  const distanceValue = num(distance?.value);
  const photoUrl = str(raw.dropoff_verification_image_url);
  const signatureUrl = str(raw.dropoff_signature_image_url);
  return {
    uid: String(raw.uid),
    group,
    status: deliveryStatus(raw.status),
    rawStatus: str(raw.status),
    // `price.value` is null until pricing settles.
    price: priceAmount !== null ? { amount: priceAmount, currency: str(price?.currency) ?? '' } : null,
    tip: decimalFrom(raw.tip),
    distance: distanceValue !== null ? { value: distanceValue, unit: str(distance?.unit) } : null,
    pickup: stop(raw, 'pickup', pickupAddress, str(raw.email)),
    dropoff: stop(raw, 'dropoff', dropoffAddress, str(raw.dropoff_email)),
    deliveryDate: calendarDate(raw.delivery_date),
    // A read's delivery_date is a full datetime: its time of day is kept here (a webhook's plain date has none).
    scheduledAt: typeof raw.delivery_date === 'string' && raw.delivery_date.includes('T') ? utcDateTime(raw.delivery_date) : null,
    deliveryEndTime: utcDateTime(raw.delivery_end_time),
    estimatedDropoffAt: utcDateTime(raw.dropoff_time_estimated),
    mode: deliveryMode(raw.package_delivery_mode),
    style: deliveryStyle(raw.delivery_style),
    rawStyle: str(raw.delivery_style),
    courier: courier(raw),
    proofOfDelivery: photoUrl || signatureUrl ? { photoUrl, signatureUrl } : null,
    cancellationReason: str(raw.cancellation_reason),
  };
}

function stop(raw: Loose, side: Side, address: Address | null, email: string | null): Stop {
  return {
    name: str(raw[`${side}_name`]),
    phone: str(raw[`${side}_phone_number`]),
    email,
    instructions: str(raw[`${side}_instructions`]),
    address,
    windowStart: utcDateTime(raw[`${side}_start_time`]),
  };
}

function flatAddress(raw: Loose, side: Side): Address | null {
  const field = (name: string) => raw[`${side}_address_${name}`];
  return addressOrNull({
    street: str(field('street')),
    number: str(field('number')),
    secondaryNumber: str(field('secondary_number')),
    city: str(field('city')),
    county: str(field('county')),
    state: str(field('state')),
    postalCode: str(field('postal_code')),
    country: str(field('country')),
    latitude: num(field('latitude')),
    longitude: num(field('longitude')),
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
  return Object.values(address).some((value) => value !== null) ? address : null;
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
  return result.id || result.name || result.pickupPhone || result.dropoffPhone || hasVehicle || location ? result : null;
}

export function geoPoint(value: unknown): { lat: number; lng: number } | null {
  if (!isJsonObject(value)) return null;
  const lat = num(value.lat);
  const lng = num(value.lng);
  return lat === null || lng === null ? null : { lat, lng };
}

function packageOf(raw: Loose, dimensions: unknown): Package {
  const requirements = Array.isArray(raw.package_requirements) ? raw.package_requirements.filter((r): r is string => typeof r === 'string') : [];
  const dims = isJsonObject(dimensions) ? { height: num(dimensions.height), length: num(dimensions.length), width: num(dimensions.width) } : null;
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
const ITEM_KEYS = new Set(['name', 'quantity', 'description', 'external_id', 'external_instance_id', 'price', 'barcode']);

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
  if (!isJsonObject(value)) return null;
  const amount = decimalFrom(value.amount);
  return amount === null ? null : { amount, currency: str(value.currency) ?? '' };
}

/** `{value: 2.5, currency}` (number) → Money. */
export function valueMoney(value: unknown): Money | null {
  if (!isJsonObject(value)) return null;
  const amount = decimalFrom(value.value);
  return amount === null ? null : { amount, currency: str(value.currency) ?? '' };
}


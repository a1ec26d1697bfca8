// How a stored delivery is written on the wire: the platform read (Delivery), the
// partner read (Order, with the doc's own spellings) and the webhook body.
import type {
  FlatAddressFields,
  JsonObject,
  WireDelivery,
  WireDeliveryCommon,
  WireDimensions,
  WireFeeAmount,
  WireOrder,
  WirePrice,
  WireWebhookAddress,
  WireWebhookEvent,
} from './wire.js';
import {
  cancellationFeeCents,
  cancellationReason,
  centsToDecimal,
  centsToMajor,
  deliveryDay,
  isFinished,
  isPickedUp,
  milestoneOf,
  readStatus,
  requestTimeToWire,
  toWireDateTime,
  webhookStatus,
  type DeliveryRecord,
} from './state.js';

export function trackingUrl(origin: string, uid: string): string {
  return `${origin}/track/${uid}`;
}

export function toPlatformDelivery(record: DeliveryRecord, origin: string, minuteOfDay = 0): WireDelivery {
  return {
    ...commonFields(record, origin, minuteOfDay),
    dimensions: dimensionsOf(record),
    tracking_link: trackingUrl(origin, record.uid),
    expected_cancellation_fee: expectedCancellationFee(record),
    delivery_style: record.deliveryStyle,
    platform_payload: record.request.platform_payload ?? null,
  };
}

/** `withStyle`: only the read by partner reference carries `delivery_style`. */
export function toPartnerOrder(record: DeliveryRecord, origin: string, withStyle: boolean, minuteOfDay = 0): WireOrder {
  const { delivery_style: _omitted, ...common } = commonFields(record, origin, minuteOfDay);
  return {
    ...common,
    ...(withStyle ? { delivery_style: record.deliveryStyle } : {}),
    partner_reference: record.request.partner_reference ?? null,
    partner_payload: record.request.partner_payload ?? null,
    delivery_start_time: requestTimeToWire(record.request.delivery_start_time),
    dimentions: dimensionsOf(record),
    tracking_url: trackingUrl(origin, record.uid),
    expected_cancelation_fee: expectedCancellationFee(record),
  };
}

function commonFields(record: DeliveryRecord, origin: string, minuteOfDay: number): WireDeliveryCommon {
  const r = record.request;
  const assigned = record.courier !== null;
  // Proof of delivery stays on the read once the courier is at the door, unless the package turned back.
  const proofs = !record.canceled && ['dropoff_arrived', 'dropoff_complete'].includes(milestoneOf(record).key);
  return {
    uid: record.uid,
    status: readStatus(record),
    price: priceOf(record),
    distance: { value: record.quote.distanceKm, unit: 'km' },
    pickup_name: r.pickup_name,
    dropoff_name: r.dropoff_name,
    // On read the date is a full datetime; which time of day the document does not say (the deliveryMinuteOfDay knob,
    // midnight by default).
    delivery_date: `${deliveryDay(record)}T${String(Math.floor(minuteOfDay / 60)).padStart(2, '0')}:${String(minuteOfDay % 60).padStart(2, '0')}:00+00:00`,
    driver_id: null,
    driver_name: assigned ? record.courier!.name : null,
    driver_location: assigned ? record.courierAt : null,
    driver_pickup_phone_number: assigned ? record.courier!.pickupPhone : null,
    driver_dropoff_phone_number: assigned ? record.courier!.dropoffPhone : null,
    driver_vehicle_make: assigned ? record.courier!.vehicleMake : null,
    driver_vehicle_model: assigned ? record.courier!.vehicleModel : null,
    driver_vehicle_year: assigned ? record.courier!.vehicleYear : null,
    dropoff_time_estimated: toWireDateTime(record.etaAt),
    ...flatAddress(record, 'pickup'),
    ...flatAddress(record, 'dropoff'),
    pickup_phone_number: r.pickup_phone_number ?? null,
    dropoff_phone_number: r.dropoff_phone_number ?? null,
    pickup_instructions: r.pickup_instructions ?? null,
    dropoff_instructions: r.dropoff_instructions ?? null,
    email: r.email,
    dropoff_email: r.dropoff_email ?? null,
    package_description: r.package_description ?? null,
    package_minimum_vehicle_size: r.package_minimum_vehicle_size ?? null,
    package_delivery_mode: r.package_delivery_mode ?? 'SCHEDULED',
    package_requirements: r.package_requirements ?? [],
    items_count: r.items_count ?? null,
    items: itemsOnRead(r.items) as WireDeliveryCommon['items'],
    weight: r.weight ?? null,
    package_value: record.quote.packageValueCents === null ? null : centsToMajor(record.quote.packageValueCents),
    pickup_start_time: requestTimeToWire(r.pickup_start_time),
    dropoff_start_time: requestTimeToWire(r.dropoff_start_time),
    delivery_end_time: deliveryEndTime(record),
    dropoff_verification_image_url: proofs ? proofUrl(origin, record.uid, 'photo') : null,
    dropoff_signature_image_url: proofs ? proofUrl(origin, record.uid, 'signature') : null,
    cancellation_reason: cancellationReason(record),
    tip: r.tip === undefined ? null : centsToMajor(record.quote.tipCents),
    delivery_style: record.deliveryStyle,
  };
}

/**
 * `{value, currency}`; `value` is null until pricing settles, which in the
 * sandbox is when a courier takes the job (the quote's fee, from then on).
 */
function priceOf(record: DeliveryRecord): WirePrice {
  return {
    value: record.courier === null ? null : centsToMajor(record.quote.feeCents),
    currency: record.quote.currency,
  };
}

/** Flat `pickup_address_*` fields; coordinates are the ones the courier drives to (given or derived). */
function flatAddress(record: DeliveryRecord, end: 'pickup' | 'dropoff'): FlatAddressFields {
  const r = record.request as unknown as Record<string, string | undefined>;
  const place = record[end];
  const out: Record<string, unknown> = {};
  for (const part of ['street', 'city', 'country', 'number', 'secondary_number', 'county', 'state', 'postal_code']) {
    out[`${end}_address_${part}`] = r[`${end}_address_${part}`] ?? null;
  }
  // A partner order without a dropoff address has no meaningful coordinates to show.
  out[`${end}_address_latitude`] = place.given ? place.point.lat : null;
  out[`${end}_address_longitude`] = place.given ? place.point.lng : null;
  return out as FlatAddressFields;
}

/**
 * The request has no dimensions field, so the read derives a plausible box from
 * the weight (taken as kg, parcels at ~200 kg/m³, 3:2:1.5 proportions, in cm);
 * without a weight there is nothing to derive from and the field is null.
 */
function dimensionsOf(record: DeliveryRecord): WireDimensions | null {
  const weight = record.request.weight;
  if (weight === undefined || weight <= 0) return null;
  const volumeCm3 = (weight / 200) * 1e6;
  const unit = Math.cbrt(volumeCm3 / 9); // length 3u × width 2u × height 1.5u = 9u³
  const cm = (n: number) => Math.round(n * 10) / 10;
  return { length: cm(3 * unit), width: cm(2 * unit), height: cm(1.5 * unit) };
}

/**
 * The platform group cannot send `delivery_end_time`, yet reads carry it ("ends
 * the dropoff window"): as sent on the partner group, else one hour after the
 * dropoff window opens, else null.
 */
function deliveryEndTime(record: DeliveryRecord): string | null {
  const r = record.request;
  if (r.delivery_end_time !== undefined) return requestTimeToWire(r.delivery_end_time);
  if (r.dropoff_start_time === undefined) return null;
  return toWireDateTime(new Date(new Date(r.dropoff_start_time).getTime() + 60 * 60_000));
}

/** What cancelling now would cost; null once cancelling is refused, the charged fee once canceled. */
export function expectedCancellationFee(record: DeliveryRecord): WireFeeAmount | null {
  if (record.canceled) return { amount: centsToDecimal(record.canceled.feeCents), currency: record.quote.currency };
  // Nothing to cancel once the courier has the package, or once the provider ended it.
  if (isPickedUp(record) || isFinished(record)) return null;
  return { amount: centsToDecimal(cancellationFeeCents(record)), currency: record.quote.currency };
}

export function proofUrl(origin: string, uid: string, kind: 'photo' | 'signature'): string {
  return `${origin}/sandbox/proofs/${uid}/${kind}.svg`;
}

/**
 * The webhook body. Partner-group orders carry their `partner_reference` and
 * `partner_payload` only with the `partnerWebhookFields` knob (the document's
 * body lists the platform's payload alone, null for them otherwise).
 */
export type SandboxWebhookEvent = WireWebhookEvent & {
  partner_reference?: string | null;
  partner_payload?: JsonObject | null;
};

export interface WebhookExtras {
  /** Set on location events: the fresh position. Delivery events use the courier's current one. */
  location?: boolean;
  /** A partner order's event carries partner_reference and partner_payload (knob partnerWebhookFields). */
  partnerFields?: boolean;
}

/** The webhook body (and JWT `payload` claim) for one event about `record`, as of now. */
export function toWebhookEvent(
  record: DeliveryRecord,
  eventName: string,
  origin: string,
  extras: WebhookExtras = {},
): SandboxWebhookEvent {
  const r = record.request;
  const assigned = record.courier !== null;
  const event: SandboxWebhookEvent = {
    uid: record.uid,
    event_name: eventName,
    status: webhookStatus(record),
    ...(record.group === 'partner' && extras.partnerFields
      ? { partner_reference: r.partner_reference ?? null, partner_payload: r.partner_payload ?? null }
      : { platform_payload: r.platform_payload ?? null }),
    price: priceOf(record),
    distance: { value: record.quote.distanceKm, unit: 'km' },
    tip: r.tip === undefined ? null : centsToMajor(record.quote.tipCents),
    pickup_name: r.pickup_name,
    pickup_phone_number: r.pickup_phone_number ?? null,
    pickup_instructions: r.pickup_instructions ?? null,
    email: r.email,
    ...nestedAddress(record, 'pickup'),
    ...nestedAddress(record, 'dropoff'),
    dropoff_name: r.dropoff_name,
    dropoff_phone_number: r.dropoff_phone_number ?? null,
    dropoff_instructions: r.dropoff_instructions ?? null,
    // Reads keep driver_id reserved (null); webhooks carry the courier's number.
    driver_id: assigned ? record.courier!.id : null,
    ...(assigned
      ? {
          driver_name: record.courier!.name,
          driver_pickup_phone_number: record.courier!.pickupPhone,
          driver_dropoff_phone_number: record.courier!.dropoffPhone,
          driver_vehicle_make: record.courier!.vehicleMake,
          driver_vehicle_model: record.courier!.vehicleModel,
          driver_vehicle_year: record.courier!.vehicleYear,
        }
      : {}),
    ...((extras.location || assigned) && record.courierAt ? { driver_location: { ...record.courierAt } } : {}),
    dropoff_time_estimated: toWireDateTime(record.etaAt),
    // Webhooks send the plain date, unlike reads.
    delivery_date: deliveryDay(record),
    pickup_start_time: requestTimeToWire(r.pickup_start_time),
    dropoff_start_time: requestTimeToWire(r.dropoff_start_time),
    delivery_start_time: requestTimeToWire(r.delivery_start_time),
    delivery_end_time: deliveryEndTime(record),
    package_description: r.package_description ?? null,
    package_minimum_vehicle_size: r.package_minimum_vehicle_size ?? null,
    package_delivery_mode: r.package_delivery_mode ?? 'SCHEDULED',
    package_requirements: r.package_requirements ?? [],
    package_value: record.quote.packageValueCents === null ? null : centsToMajor(record.quote.packageValueCents),
    items_count: r.items_count ?? null,
    items: itemsOnRead(r.items) as WireWebhookEvent['items'],
    weight: r.weight ?? null,
  };
  if (eventName === 'delivery.dropoff_arrived') {
    event.dropoff_verification_image_url = proofUrl(origin, record.uid, 'photo');
    event.dropoff_signature_image_url = proofUrl(origin, record.uid, 'signature');
  }
  const reason = cancellationReason(record);
  if (eventName === 'delivery.canceled' && reason !== null) event.cancellation_reason = reason;
  return event;
}

/** `{pickup_address: {...}}`, or nothing at all when the request had no address for that end. */
function nestedAddress(
  record: DeliveryRecord,
  end: 'pickup' | 'dropoff',
): Partial<Record<'pickup_address' | 'dropoff_address', WireWebhookAddress>> {
  const place = record[end];
  if (!place.given) return {};
  const r = record.request as unknown as Record<string, string | undefined>;
  const address: WireWebhookAddress = {};
  for (const part of ['street', 'number', 'city', 'county', 'state', 'postal_code', 'country'] as const) {
    const value = r[`${end}_address_${part}`];
    if (value !== undefined) address[part] = value;
  }
  address.latitude = place.point.lat;
  address.longitude = place.point.lng;
  return { [`${end}_address`]: address };
}

/**
 * Items come back as sent, price included: the document lists only tip and
 * package_value as converted from cents on read, and shows nothing of an item
 * on read beyond its being an object.
 */
function itemsOnRead(items: unknown): unknown[] | null {
  return Array.isArray(items) ? items : null;
}

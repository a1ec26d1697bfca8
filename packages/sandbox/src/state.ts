// What the sandbox remembers: merchants, deliveries (platform group) and orders
// (partner group), and the pure rules that price them (geography.ts places them).
import { randomBytes, randomUUID } from 'node:crypto';
import type { DeliveryEventName, LocationEventName, WireDeliveryRequest, WireLatLng } from './wire.js';
import { haversineKm, locate, offsetKm, type Place } from './geography.js';
import type { Outcome, SandboxMerchant, WebhookScript } from './types.js';
import { deriveSeed, freshSeed, seededRandom, webhookScriptOf } from './webhook-script.js';

export type Group = 'platform' | 'partner';

export type MilestoneKey =
  | 'created'
  | 'assigned'
  | 'pickup_enroute'
  | 'pickup_arrived'
  | 'pickup_complete'
  | 'dropoff_enroute'
  | 'dropoff_arrived'
  | 'dropoff_complete'
  | 'failed'
  | 'provider_canceled'
  | 'return_in_progress'
  | 'returned';

export interface Milestone {
  key: MilestoneKey;
  /** `status` on read: upper snake, as the doc's `DROPOFF_COMPLETE` (a cancellation reads `Canceled`). */
  status: string;
  /** `status` on webhooks: human readable, as the doc's `Picked Up`. */
  label: string;
  event: DeliveryEventName;
  /** The location event sent with this milestone; none where the courier does not move on. */
  location: LocationEventName | null;
}

export const CANCELED_STATUS = 'Canceled';

const milestone = (
  key: MilestoneKey,
  event: DeliveryEventName,
  status: string,
  label: string,
  location: LocationEventName | null,
): Milestone => ({
  key,
  event,
  status,
  label,
  location,
});

export const MILESTONE: Readonly<Record<MilestoneKey, Milestone>> = Object.freeze({
  created: milestone('created', 'delivery.created', 'CREATED', 'Created', null),
  assigned: milestone('assigned', 'delivery.assigned', 'ASSIGNED', 'Assigned', 'location.assigned_driver'),
  pickup_enroute: milestone(
    'pickup_enroute',
    'delivery.pickup_enroute',
    'PICKUP_ENROUTE',
    'Pickup Enroute',
    'location.pickup_enroute',
  ),
  pickup_arrived: milestone(
    'pickup_arrived',
    'delivery.pickup_arrived',
    'PICKUP_ARRIVED',
    'Pickup Arrived',
    'location.pickup_arrived',
  ),
  pickup_complete: milestone(
    'pickup_complete',
    'delivery.pickup_complete',
    'PICKUP_COMPLETE',
    'Picked Up',
    'location.pickup_complete',
  ),
  dropoff_enroute: milestone(
    'dropoff_enroute',
    'delivery.dropoff_enroute',
    'DROPOFF_ENROUTE',
    'Dropoff Enroute',
    'location.dropoff_enroute',
  ),
  dropoff_arrived: milestone(
    'dropoff_arrived',
    'delivery.dropoff_arrived',
    'DROPOFF_ARRIVED',
    'Dropoff Arrived',
    'location.dropoff_arrived',
  ),
  dropoff_complete: milestone('dropoff_complete', 'delivery.dropoff_complete', 'DROPOFF_COMPLETE', 'Delivered', null),
  // Off the straight path: a failure (at the door, or at the pickup) or a cancel by the provider, and the way back.
  failed: milestone('failed', 'delivery.failed', 'FAILED', 'Failed', null),
  provider_canceled: milestone('provider_canceled', 'delivery.canceled', CANCELED_STATUS, CANCELED_STATUS, null),
  return_in_progress: milestone(
    'return_in_progress',
    'delivery.return_in_progress',
    'RETURN_IN_PROGRESS',
    'Return In Progress',
    'location.return_in_progress',
  ),
  returned: milestone('returned', 'delivery.returned', 'RETURNED', 'Returned', null),
});

/** Every outcome (types.ts), in the order the docs list them and weighted draws walk them. */
export const OUTCOMES = [
  'delivered',
  'failed_then_returned',
  'canceled_then_returned',
  'failed_then_delivered',
  'canceled_after_pickup_then_returned',
  'canceled_before_pickup',
  'failed_before_pickup',
] as const satisfies readonly Outcome[];
/** Fails to compile when an outcome is missing from OUTCOMES. */
const _everyOutcomeListed: Exclude<Outcome, (typeof OUTCOMES)[number]> extends never ? true : never = true;
void _everyOutcomeListed;

/**
 * The `platform_payload` / `partner_payload` entry that fixes a delivery's
 * outcome, for tests and demos; the payload itself is stored untouched.
 */
export const OUTCOME_PAYLOAD_FIELD = 'sandbox_outcome';

const M = MILESTONE;
const TO_PICKUP_ARRIVED = [M.created, M.assigned, M.pickup_enroute, M.pickup_arrived] as const;
const TO_PICKUP = [...TO_PICKUP_ARRIVED, M.pickup_complete] as const;

/**
 * The milestones of each outcome, in order; the last one ends the delivery.
 * The plans that go past pickup share the path up to pickup_complete, so a step
 * index means the same milestone on all of them until the delivery branches: the
 * outcome may be decided as late as pickup. A failure happens at the recipient's
 * door (or, before pickup, at the store); a provider cancel after pickup on the
 * way to the recipient, or right after pickup as the courier drives off.
 */
export const PLANS: Readonly<Record<Outcome, readonly Milestone[]>> = Object.freeze({
  delivered: [...TO_PICKUP, M.dropoff_enroute, M.dropoff_arrived, M.dropoff_complete],
  failed_then_returned: [
    ...TO_PICKUP,
    M.dropoff_enroute,
    M.dropoff_arrived,
    M.failed,
    M.return_in_progress,
    M.returned,
  ],
  // A second attempt after a failure at the door: the document never says what may follow `failed`.
  failed_then_delivered: [
    ...TO_PICKUP,
    M.dropoff_enroute,
    M.dropoff_arrived,
    M.failed,
    M.dropoff_enroute,
    M.dropoff_arrived,
    M.dropoff_complete,
  ],
  canceled_then_returned: [...TO_PICKUP, M.dropoff_enroute, M.provider_canceled, M.return_in_progress, M.returned],
  canceled_after_pickup_then_returned: [...TO_PICKUP, M.provider_canceled, M.return_in_progress, M.returned],
  canceled_before_pickup: [...TO_PICKUP_ARRIVED, M.provider_canceled],
  failed_before_pickup: [...TO_PICKUP_ARRIVED, M.failed],
});

/** Indexes of the shared part of the plans that get past pickup (and of the whole delivered plan). */
export const STEP = Object.freeze({
  created: 0,
  assigned: 1,
  pickupEnroute: 2,
  pickupArrived: 3,
  pickupComplete: 4,
  dropoffEnroute: 5,
  /** On the delivered plan only. */
  dropoffComplete: 7,
});

/**
 * The webhooks a delivery of this outcome sends, in true order, when moved by
 * `advance()` alone (stepMs 0: no location ticks) and never reassigned: the
 * indexes a `sandbox_webhooks` script names. A merchant cancel ends it early.
 */
export function plannedWebhooks(outcome: Outcome): string[] {
  return PLANS[outcome].flatMap((m) => (m.location ? [m.event, m.location] : [m.event]));
}

export interface Courier {
  /** driver_id: a number on webhooks (reads keep it reserved and null, as the document says). */
  id: number;
  name: string;
  pickupPhone: string;
  dropoffPhone: string;
  vehicleMake: string;
  vehicleModel: string;
  vehicleYear: number;
  /** Where the courier was when assigned: a few km from pickup. */
  origin: WireLatLng;
}

export interface Quote {
  distanceKm: number;
  feeCents: number;
  tipCents: number;
  packageValueCents: number | null;
  currency: string;
}

export interface DeliveryRecord {
  uid: string;
  group: Group;
  merchantKey: string;
  createdAt: Date;
  /** The validated request body, nulls dropped, otherwise as sent. */
  request: WireDeliveryRequest;
  pickup: Place;
  dropoff: Place;
  quote: Quote;
  deliveryStyle: string;
  /**
   * Decided at creation when the payload or the outcomeWeights knob says, else when the package is picked up; null
   * until then.
   */
  outcome: Outcome | null;
  /**
   * The seed of this delivery's draws (outcome, reassignment, webhook faults and
   * order): its payload's `sandbox_webhooks.seed`, else derived from the seed knob
   * and the booking's place in line, else fresh. Shown in its history.
   */
  seed: number;
  /** Draws for the lifecycle (outcome, reassignment), from `seed`. */
  random: () => number;
  /** The payload's `sandbox_webhooks`: how its webhooks go out; null leaves them to the fault knobs. */
  webhookScript: WebhookScript | null;
  /** Index into the plan of the outcome (PLANS.delivered while undecided). */
  step: number;
  courier: Courier | null;
  courierAt: WireLatLng | null;
  /** Where the courier turned back towards the pickup, once returning. */
  returnFrom: WireLatLng | null;
  etaAt: Date;
  /** Canceled by the merchant (platform or partner) before pickup: the delivery stops there. */
  canceled: { at: Date; reason: string; feeCents: number } | null;
  /** Canceled by the provider after pickup: the package then goes back. */
  providerCancellation: { at: Date; reason: string } | null;
}

export class SandboxState {
  /** Set once the server listens; tracking and proof URLs hang off it. */
  origin = '';
  /** The deliveryMinuteOfDay knob: the time of day a read's delivery_date carries. */
  deliveryMinuteOfDay = 0;
  /** The readScope knob: whose deliveries a key may read. */
  readScope: 'merchant' | 'platform' = 'merchant';
  /** The createAnswerShape knob: where create's answer puts uid and tracking_link. */
  createAnswerShape: 'top-level' | 'data' = 'top-level';
  /** The seed knob: with it, each booking's draws follow from it and the booking's place in line. */
  seed: number | null = null;
  readonly deliveries = new Map<string, DeliveryRecord>();
  private readonly merchantsByKey: Map<string, SandboxMerchant>;
  private readonly platformIds: Set<string>;
  /** `${merchant}\n${partner_reference}` → uid: references are unique per merchant (any of its keys). */
  private readonly partnerReferences = new Map<string, string>();

  constructor(readonly merchants: readonly SandboxMerchant[]) {
    this.merchantsByKey = new Map(merchants.map((m) => [m.key, m]));
    this.platformIds = new Set(merchants.map((m) => m.platformId));
  }

  merchantByKey(key: string): SandboxMerchant | undefined {
    return this.merchantsByKey.get(key);
  }

  /** Who holds a key: its merchantId, or the key itself for a merchant with one key (SandboxMerchant.merchantId). */
  merchantOf(key: string): string {
    const merchant = this.merchantsByKey.get(key);
    return merchant?.merchantId ?? key;
  }

  /** A new key of the merchant holding `key` (a rotation); undefined for a key the sandbox does not know. */
  addKey(key: string): SandboxMerchant | undefined {
    const merchant = this.merchantsByKey.get(key);
    if (!merchant) return undefined;
    // The merchant is named after the key it had first, so what it booked with that key stays its own.
    merchant.merchantId ??= key;
    const added: SandboxMerchant = {
      key: `sk_test_${randomBytes(12).toString('hex')}`,
      name: merchant.name,
      platformId: merchant.platformId,
      merchantId: merchant.merchantId,
    };
    this.merchantsByKey.set(added.key, added);
    return added;
  }

  /** Keys the merchant revoked (revokeKey): answered 401 from then on. */
  readonly revokedKeys = new Set<string>();

  hasPlatform(platformId: string): boolean {
    return this.platformIds.has(platformId);
  }

  /** Bookings made so far, both groups: a booking's place in line seeds its draws under the seed knob. */
  booked = 0;

  /** Books a validated request; the lifecycle is started by the caller. */
  create(group: Group, merchantKey: string, request: WireDeliveryRequest): DeliveryRecord {
    if (group === 'partner' && request.partner_reference !== undefined) {
      if (this.findByPartnerReference(merchantKey, request.partner_reference)) {
        throw new DuplicateReferenceError(request.partner_reference);
      }
    }
    const createdAt = new Date();
    const booking = (this.booked += 1);
    const webhookScript = webhookScriptOf(request.platform_payload ?? request.partner_payload);
    const deliverySeed = webhookScript?.seed ?? (this.seed === null ? freshSeed() : deriveSeed(this.seed, booking));
    const record: DeliveryRecord = {
      uid: randomUUID(),
      group,
      merchantKey,
      createdAt,
      request,
      pickup: locate('pickup', request),
      dropoff: locate('dropoff', request),
      quote: priceDelivery(request),
      deliveryStyle: request.delivery_style ?? 'Standard',
      outcome: forcedOutcome(request),
      seed: deliverySeed,
      random: seededRandom(deriveSeed(deliverySeed, 'lifecycle')),
      webhookScript,
      step: STEP.created,
      courier: null,
      courierAt: null,
      returnFrom: null,
      etaAt: initialEta(request, createdAt),
      canceled: null,
      providerCancellation: null,
    };
    this.deliveries.set(record.uid, record);
    if (group === 'partner' && request.partner_reference !== undefined) {
      this.partnerReferences.set(`${this.merchantOf(merchantKey)}\n${request.partner_reference}`, record.uid);
    }
    return record;
  }

  /** Takes back a delivery a world file kept (booked before a restart), with its partner reference. */
  restore(record: DeliveryRecord): void {
    this.deliveries.set(record.uid, record);
    if (record.group === 'partner' && record.request.partner_reference !== undefined) {
      this.partnerReferences.set(
        `${this.merchantOf(record.merchantKey)}\n${record.request.partner_reference}`,
        record.uid,
      );
    }
    if (record.courier) noteDriverId(record.courier.id);
  }

  /** A delivery the caller may see: same group, same merchant (any of its keys). Anything else is "not found". */
  find(uid: string, group: Group, merchantKey: string): DeliveryRecord | undefined {
    const record = this.deliveries.get(uid);
    return record && record.group === group && this.merchantOf(record.merchantKey) === this.merchantOf(merchantKey)
      ? record
      : undefined;
  }

  /**
   * A delivery the caller may read by uid: its own, or with readScope `platform`
   * any of the same group booked by a merchant of the caller's platform.
   */
  findReadable(uid: string, group: Group, merchant: SandboxMerchant): DeliveryRecord | undefined {
    if (this.readScope === 'merchant') return this.find(uid, group, merchant.key);
    const record = this.deliveries.get(uid);
    return record &&
      record.group === group &&
      this.merchantByKey(record.merchantKey)?.platformId === merchant.platformId
      ? record
      : undefined;
  }

  findByPartnerReference(merchantKey: string, reference: string): DeliveryRecord | undefined {
    const uid = this.partnerReferences.get(`${this.merchantOf(merchantKey)}\n${reference}`);
    return uid === undefined ? undefined : this.deliveries.get(uid);
  }
}

export class DuplicateReferenceError extends Error {
  override readonly name = 'DuplicateReferenceError';
  constructor(reference: string) {
    super(`partner_reference ${reference} is already used by another order`);
  }
}

/** The milestones this delivery goes through (the delivered path while its outcome is open). */
export function planOf(record: DeliveryRecord): readonly Milestone[] {
  return PLANS[record.outcome ?? 'delivered'];
}

/** The milestone the delivery is at. */
export function milestoneOf(record: DeliveryRecord): Milestone {
  return planOf(record)[record.step]!;
}

/** The delivery reached the last milestone of its plan, or the merchant canceled it: nothing follows. */
export function isFinished(record: DeliveryRecord): boolean {
  return record.canceled !== null || record.step === planOf(record).length - 1;
}

/** The courier has the package (or had it, on the way back): the merchant can no longer cancel. */
export function isPickedUp(record: DeliveryRecord): boolean {
  return planOf(record)
    .slice(0, record.step + 1)
    .some((m) => m.key === 'pickup_complete');
}

/** Status as the read endpoints spell it. */
export function readStatus(record: DeliveryRecord): string {
  return record.canceled ? CANCELED_STATUS : milestoneOf(record).status;
}

/** Status as webhooks spell it. */
export function webhookStatus(record: DeliveryRecord): string {
  return record.canceled ? CANCELED_STATUS : milestoneOf(record).label;
}

/** Why it was canceled, by the merchant or by the provider; null when it was not. */
export function cancellationReason(record: DeliveryRecord): string | null {
  return record.canceled?.reason ?? record.providerCancellation?.reason ?? null;
}

/** The outcome a payload's `sandbox_outcome` forces; null when it names none (validation rejects bad values). */
export function forcedOutcome(request: WireDeliveryRequest): Outcome | null {
  const value = outcomeInPayload(request.platform_payload ?? request.partner_payload);
  return typeof value === 'string' && (OUTCOMES as readonly string[]).includes(value) ? (value as Outcome) : null;
}

/** The raw `sandbox_outcome` entry of a payload, if any. */
export function outcomeInPayload(payload: unknown): unknown {
  return typeof payload === 'object' && payload !== null && !Array.isArray(payload)
    ? (payload as Record<string, unknown>)[OUTCOME_PAYLOAD_FIELD]
    : undefined;
}

// ---------------------------------------------------------------------------
// Pricing

const BASE_FEE_CENTS = 499;
const FEE_CENTS_PER_KM = 120;
/** Charged when cancelling after a courier took the job (the doc only says "a fee"). */
const LATE_CANCELLATION_FEE_CENTS = 250;

/** What cancelling costs right now: free until a courier takes the job. */
export function cancellationFeeCents(record: DeliveryRecord): number {
  return record.step >= STEP.assigned ? LATE_CANCELLATION_FEE_CENTS : 0;
}

/** Price and distance of a (validated) request. Amounts stay integer cents until they go on the wire. */
export function priceDelivery(request: WireDeliveryRequest): Quote {
  const pickup = locate('pickup', request).point;
  const dropoff = locate('dropoff', request).point;
  const distanceKm = round2(haversineKm(pickup, dropoff));
  return {
    distanceKm,
    feeCents: BASE_FEE_CENTS + Math.round(FEE_CENTS_PER_KM * distanceKm),
    // Request `tip` and `package_value` are in cents (the facade's default unit).
    tipCents: Math.round(request.tip ?? 0),
    packageValueCents: request.package_value === undefined ? null : Math.round(request.package_value),
    currency: (request.currency ?? 'USD').toUpperCase(),
  };
}

/** Cents → major units as a float, the way the upstream's reads write money (1234 → 12.34). */
export function centsToMajor(cents: number): number {
  return Math.round(cents) / 100;
}

/** Cents → decimal string, the way the platform group writes fees (250 → "2.50"). */
export function centsToDecimal(cents: number): string {
  const sign = cents < 0 ? '-' : '';
  const abs = Math.abs(Math.round(cents));
  return `${sign}${Math.floor(abs / 100)}.${String(abs % 100).padStart(2, '0')}`;
}

function round2(n: number): number {
  return Math.round(n * 100) / 100;
}

// ---------------------------------------------------------------------------
// Couriers

const COURIER_NAMES = [
  'Ana Costa',
  'Ben Okafor',
  'Chen Wei',
  'Dana Kowalski',
  'Eli Navarro',
  'Fatima Haddad',
  'Gus Lindqvist',
  'Hana Sato',
];
const VEHICLES: readonly [make: string, model: string][] = [
  ['Toyota', 'Prius'],
  ['Honda', 'Civic'],
  ['Ford', 'Transit Connect'],
  ['Nissan', 'Leaf'],
  ['Kia', 'Niro'],
];
const LARGE_VEHICLES: readonly [make: string, model: string][] = [
  ['Ford', 'Transit'],
  ['Mercedes-Benz', 'Sprinter'],
  ['Toyota', 'RAV4'],
];

/** Each courier the sandbox assigns gets the next driver_id. */
let lastDriverId = 1000;

/** A courier of a restored delivery has this id: later couriers get higher ones, never it again. */
function noteDriverId(id: number): void {
  lastDriverId = Math.max(lastDriverId, id);
}

/** A courier for the record; another one than `replacing` (by name too, so a reassignment shows) when given. */
export function pickCourier(record: DeliveryRecord, replacing?: Courier): Courier {
  const oversize = record.deliveryStyle === 'Oversize';
  const [vehicleMake, vehicleModel] = pick(oversize ? LARGE_VEHICLES : VEHICLES);
  const bearing = Math.random() * 2 * Math.PI;
  const km = 2 + Math.random() * 2;
  lastDriverId += 1;
  return {
    id: lastDriverId,
    name: pick(COURIER_NAMES.filter((name) => name !== replacing?.name)),
    pickupPhone: fakePhone(),
    dropoffPhone: fakePhone(),
    vehicleMake,
    vehicleModel,
    vehicleYear: 2015 + Math.floor(Math.random() * 9),
    origin: offsetKm(record.pickup.point, km * Math.cos(bearing), km * Math.sin(bearing)),
  };
}

/** Why a provider gives up on a delivery; the `provider:` prefix tells it from a merchant's cancel. */
const PROVIDER_CANCELLATION_REASONS = [
  'provider: vehicle breakdown',
  'provider: courier unavailable',
  'provider: road closed',
];

export function pickProviderCancellationReason(): string {
  return pick(PROVIDER_CANCELLATION_REASONS);
}

function pick<T>(list: readonly T[]): T {
  return list[Math.floor(Math.random() * list.length)]!;
}

/** A +1-555 number: reserved for fiction, and within the 15-character phone bound. */
function fakePhone(): string {
  return `+1555${String(Math.floor(Math.random() * 1e7)).padStart(7, '0')}`;
}

// ---------------------------------------------------------------------------
// Time

/** The read and webhook datetime spelling: `YYYY-MM-DDTHH:MM:SS+00:00`. */
export function toWireDateTime(date: Date): string {
  return `${date.toISOString().slice(0, 19)}+00:00`;
}

/** A validated request time (`...Z`) re-spelt for output. */
export function requestTimeToWire(value: string | undefined): string | null {
  return value === undefined ? null : toWireDateTime(new Date(value));
}

/** The delivery date: as sent, or the booking day for on-demand deliveries. */
export function deliveryDay(record: DeliveryRecord): string {
  return record.request.delivery_date ?? record.createdAt.toISOString().slice(0, 10);
}

const DEFAULT_ETA_MS = 45 * 60_000;

function initialEta(request: WireDeliveryRequest, createdAt: Date): Date {
  // A scheduled window's start is the best guess until the simulator runs.
  if (request.dropoff_start_time !== undefined) return new Date(request.dropoff_start_time);
  return new Date(createdAt.getTime() + DEFAULT_ETA_MS);
}

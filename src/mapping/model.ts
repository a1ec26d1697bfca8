// The one Delivery model that platform Deliveries, partner Orders and webhook
// bodies are read into, and that the GraphQL types expose.
import type { DeliveryStatus } from '../domain/status.js';

export type ApiGroup = 'PLATFORM' | 'PARTNER';

// The statuses are the domain's (src/domain/status.ts); named here too, as the model's field type.
export { DELIVERY_STATUSES, type DeliveryStatus } from '../domain/status.js';

export const DELIVERY_STYLES = ['STANDARD', 'HYBRID', 'SPECIAL_HANDLING', 'OVERSIZE', 'OTHER'] as const;
export type DeliveryStyle = (typeof DELIVERY_STYLES)[number];

export type DeliveryMode = 'NOW' | 'SCHEDULED';

/** An exact amount in major units as a decimal string ("12.50"), with its currency. */
export interface Money {
  amount: string;
  currency: string;
}

export interface Distance {
  value: number;
  unit: string | null;
}

export interface GeoPoint {
  lat: number;
  lng: number;
}

export interface Address {
  street: string | null;
  number: string | null;
  secondaryNumber: string | null;
  city: string | null;
  county: string | null;
  state: string | null;
  postalCode: string | null;
  country: string | null;
  latitude: number | null;
  longitude: number | null;
}

export interface Stop {
  name: string | null;
  phone: string | null;
  email: string | null;
  instructions: string | null;
  address: Address | null;
  windowStart: string | null;
}

export interface Courier {
  /** driver_id as a string: webhooks carry a number; reads keep it reserved (null). */
  id: string | null;
  name: string | null;
  pickupPhone: string | null;
  dropoffPhone: string | null;
  vehicle: { make: string | null; model: string | null; year: number | null } | null;
  location: GeoPoint | null;
}

export interface Item {
  name: string | null;
  quantity: number | null;
  description: string | null;
  externalId: string | null;
  externalInstanceId: string | null;
  /**
   * The price as the upstream sent it, a decimal string in the unit it was sent
   * in (UPSTREAM_ITEM_PRICE_UNIT: the document states no unit for items, and an item
   * is not listed among the amounts converted from cents on read). The GraphQL
   * Item converts it to major units.
   */
  price: string | null;
  barcode: string | null;
  /** What the upstream sent for the item beyond the documented keys, as sent; null when nothing. */
  extra: Record<string, unknown> | null;
}

export interface Package {
  description: string | null;
  minimumVehicleSize: string | null;
  requirements: string[];
  itemsCount: number | null;
  items: Item[] | null;
  weight: number | null;
  dimensions: { height: number | null; length: number | null; width: number | null } | null;
  declaredValue: string | null;
}

export interface Delivery {
  uid: string;
  group: ApiGroup;
  status: DeliveryStatus;
  rawStatus: string | null;
  price: Money | null;
  tip: string | null;
  distance: Distance | null;
  pickup: Stop;
  dropoff: Stop;
  deliveryDate: string | null;
  /**
   * The scheduled date with its time of day (UTC), where the source gives one: reads do, webhook events carry a plain
   * date.
   */
  scheduledAt: string | null;
  deliveryStartTime: string | null;
  deliveryEndTime: string | null;
  estimatedDropoffAt: string | null;
  mode: DeliveryMode | null;
  style: DeliveryStyle | null;
  rawStyle: string | null;
  package: Package;
  courier: Courier | null;
  proofOfDelivery: { photoUrl: string | null; signatureUrl: string | null } | null;
  cancellationReason: string | null;
  expectedCancellationFee: Money | null;
  trackingUrl: string | null;
  payload: unknown;
  partnerReference: string | null;
  /**
   * When the upstream last confirmed this answer (UTC, `…T…Z`): its read, or what confirmed the stored view it came
   * from (src/graphql/delivery-reads.ts); undefined where the source does not say (the field then says now).
   */
  asOf?: string;
}

/**
 * What createDelivery knows before any read: the uid and the tracking URL.
 * The GraphQL Delivery type reads the rest on demand, once.
 */
export interface DeliveryStub {
  uid: string;
  group: ApiGroup;
  trackingUrl: string | null;
  stub: true;
}

export type DeliveryParent = Delivery | DeliveryStub;

export function isStub(value: DeliveryParent): value is DeliveryStub {
  return (value as DeliveryStub).stub === true;
}

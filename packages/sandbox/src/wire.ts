// The upstream's REST shapes as the sandbox writes them, spelled exactly as the
// upstream's API document does (including its `dimentions`, `tracking_url` and
// `expected_cancelation_fee`). The facade reads the same document with types of its
// own (src/upstream/wire.ts): the simulator shares no code with what it tests.

/** Any JSON object: a payload passed through, an item. */
export type JsonObject = { [key: string]: unknown };

/** One of the two address groups, flattened with a `pickup_` or `dropoff_` prefix. */
export interface FlatAddressFields {
  pickup_address_street?: string | null;
  pickup_address_city?: string | null;
  pickup_address_country?: string | null;
  pickup_address_number?: string | null;
  pickup_address_secondary_number?: string | null;
  pickup_address_county?: string | null;
  pickup_address_state?: string | null;
  pickup_address_postal_code?: string | null;
  pickup_address_latitude?: number | null;
  pickup_address_longitude?: number | null;
  dropoff_address_street?: string | null;
  dropoff_address_city?: string | null;
  dropoff_address_country?: string | null;
  dropoff_address_number?: string | null;
  dropoff_address_secondary_number?: string | null;
  dropoff_address_county?: string | null;
  dropoff_address_state?: string | null;
  dropoff_address_postal_code?: string | null;
  dropoff_address_latitude?: number | null;
  dropoff_address_longitude?: number | null;
}

export interface WirePrice {
  value: number | null;
  currency: string;
}

export interface WireDistance {
  value: number;
  unit?: string | null;
}

export interface WireLatLng {
  lat: number;
  lng: number;
}

export interface WireDimensions {
  height?: number | null;
  length?: number | null;
  width?: number | null;
}

/** `{amount: "2.50", currency}`: a decimal string. */
export interface WireFeeAmount {
  amount: string;
  currency: string;
}

/** `{value: 2.5, currency}`: the partner group's cancelation fee. */
export interface WireFeeValue {
  value: number;
  currency: string;
}

/** Item as sent in request bodies; on read the upstream only says "objects". */
export interface WireItem {
  name?: string;
  quantity?: number;
  description?: string;
  external_id?: string;
  external_instance_id?: string;
  price?: number;
  barcode?: string;
}

/** Fields a platform Delivery and a partner Order share. */
export interface WireDeliveryCommon extends FlatAddressFields {
  uid: string;
  status?: string | null;
  price?: WirePrice | null;
  distance?: WireDistance | null;
  pickup_name?: string | null;
  dropoff_name?: string | null;
  delivery_date?: string | null;
  driver_id?: number | null;
  driver_name?: string | null;
  driver_location?: WireLatLng | null;
  driver_pickup_phone_number?: string | null;
  driver_dropoff_phone_number?: string | null;
  driver_vehicle_make?: string | null;
  driver_vehicle_model?: string | null;
  driver_vehicle_year?: number | null;
  dropoff_time_estimated?: string | null;
  pickup_phone_number?: string | null;
  dropoff_phone_number?: string | null;
  pickup_instructions?: string | null;
  dropoff_instructions?: string | null;
  email?: string | null;
  dropoff_email?: string | null;
  package_description?: string | null;
  package_minimum_vehicle_size?: string | null;
  package_delivery_mode?: string | null;
  package_requirements?: string[] | null;
  items_count?: number | null;
  items?: JsonObject[] | null;
  weight?: number | null;
  package_value?: number | null;
  pickup_start_time?: string | null;
  dropoff_start_time?: string | null;
  delivery_end_time?: string | null;
  dropoff_verification_image_url?: string | null;
  dropoff_signature_image_url?: string | null;
  cancellation_reason?: string | null;
  tip?: number | null;
  delivery_style?: string | null;
}

/** Platform group read: `GET /{platform}/deliveries/{uid}` → `{data: Delivery}`. */
export interface WireDelivery extends WireDeliveryCommon {
  dimensions?: WireDimensions | null;
  platform_payload?: JsonObject | null;
  tracking_link?: string | null;
  expected_cancellation_fee?: WireFeeAmount | null;
}

/** Partner group read: `GET /orders/{uid}` and `/orders/partner/{ref}` → `{data: Order}`. */
export interface WireOrder extends WireDeliveryCommon {
  partner_reference?: string | null;
  partner_payload?: JsonObject | null;
  delivery_start_time?: string | null;
  dimentions?: WireDimensions | null;
  tracking_url?: string | null;
  expected_cancelation_fee?: WireFeeAmount | null;
}

/** Request body of quote and create (platform) and of the partner quote. */
export interface WireDeliveryRequest extends FlatAddressFields {
  pickup_name: string;
  dropoff_name: string;
  email: string;
  pickup_phone_number?: string;
  dropoff_phone_number?: string;
  pickup_instructions?: string;
  dropoff_instructions?: string;
  pickup_start_time?: string;
  dropoff_start_time?: string;
  delivery_date?: string;
  package_delivery_mode?: string;
  package_minimum_vehicle_size?: string;
  delivery_style?: string;
  weight?: number;
  dropoff_email?: string;
  package_description?: string;
  package_requirements?: string[];
  items?: WireItem[];
  items_count?: number;
  package_value?: number;
  tip?: number;
  currency?: string;
  /** Platform group only. */
  platform_payload?: JsonObject;
  /** Partner group only. */
  delivery_start_time?: string;
  delivery_end_time?: string;
  partner_reference?: string;
  partner_payload?: JsonObject;
}

export interface WireQuoteResult {
  message: string;
  data: {
    price: { delivery_fee: number; tip: number; currency: string };
    distance: number;
  };
}

export interface WirePlatformCancellation {
  message: string;
  uid: string;
  data: { status: string; cancellation_fee: WireFeeAmount };
}

export interface WirePartnerCancellation {
  message: string;
  uid: string;
  data: { status: string; partner_reference: string; cancelation_fee: WireFeeValue };
}

export interface WireAvailability {
  service: string;
  available: boolean;
}

export interface WireWebhookAddress {
  street?: string | null;
  number?: string | null;
  city?: string | null;
  county?: string | null;
  state?: string | null;
  postal_code?: string | null;
  country?: string | null;
  latitude?: number | null;
  longitude?: number | null;
}

/** The webhook event body: the signed JWT's `payload` claim. */
export interface WireWebhookEvent {
  uid: string;
  event_name: string;
  status?: string | null;
  platform_payload?: JsonObject | null;
  price?: WirePrice | null;
  distance?: WireDistance | null;
  tip?: number | null;
  pickup_name?: string | null;
  pickup_phone_number?: string | null;
  pickup_instructions?: string | null;
  email?: string | null;
  pickup_address?: WireWebhookAddress | null;
  dropoff_address?: WireWebhookAddress | null;
  dropoff_name?: string | null;
  dropoff_phone_number?: string | null;
  dropoff_instructions?: string | null;
  driver_id?: number | null;
  driver_name?: string | null;
  driver_location?: WireLatLng | null;
  driver_pickup_phone_number?: string | null;
  driver_dropoff_phone_number?: string | null;
  driver_vehicle_make?: string | null;
  driver_vehicle_model?: string | null;
  driver_vehicle_year?: number | null;
  dropoff_time_estimated?: string | null;
  delivery_date?: string | null;
  pickup_start_time?: string | null;
  dropoff_start_time?: string | null;
  delivery_start_time?: string | null;
  delivery_end_time?: string | null;
  package_description?: string | null;
  package_minimum_vehicle_size?: string | null;
  package_delivery_mode?: string | null;
  package_requirements?: string[] | null;
  package_value?: number | null;
  items_count?: number | null;
  items?: JsonObject[] | null;
  weight?: number | null;
  dropoff_verification_image_url?: string | null;
  dropoff_signature_image_url?: string | null;
  cancellation_reason?: string | null;
  /** Not in the documented body; the sandbox (and possibly the upstream) adds them on partner orders' events. */
  partner_reference?: string | null;
  partner_payload?: JsonObject | null;
}

/** Milestones the upstream announces as `delivery.*` events, in lifecycle order. */
export const DELIVERY_EVENT_NAMES = [
  'delivery.created',
  'delivery.assigned',
  'delivery.pickup_enroute',
  'delivery.pickup_arrived',
  'delivery.pickup_complete',
  'delivery.dropoff_enroute',
  'delivery.dropoff_arrived',
  'delivery.dropoff_complete',
  'delivery.return_in_progress',
  'delivery.returned',
  'delivery.canceled',
  'delivery.failed',
] as const;

export const LOCATION_EVENT_NAMES = [
  'location.assigned_driver',
  'location.pickup_enroute',
  'location.pickup_arrived',
  'location.pickup_complete',
  'location.dropoff_enroute',
  'location.dropoff_arrived',
  'location.return_in_progress',
] as const;

export type DeliveryEventName = (typeof DELIVERY_EVENT_NAMES)[number];
export type LocationEventName = (typeof LOCATION_EVENT_NAMES)[number];

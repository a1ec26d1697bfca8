/* eslint-disable */
import type { DocumentTypeDecoration } from '@graphql-typed-document-node/core';
export type Maybe<T> = T | null;
export type InputMaybe<T> = T | null | undefined;
export type Exact<T extends { [key: string]: unknown }> = { [K in keyof T]: T[K] };
export type MakeOptional<T, K extends keyof T> = Omit<T, K> & { [SubKey in K]?: Maybe<T[SubKey]> };
export type MakeMaybe<T, K extends keyof T> = Omit<T, K> & { [SubKey in K]: Maybe<T[SubKey]> };
export type MakeEmpty<T extends { [key: string]: unknown }, K extends keyof T> = { [_ in K]?: never };
export type Incremental<T> = T | { [P in keyof T]?: P extends ' $fragmentName' | '__typename' ? T[P] : never };
/** All built-in and custom scalars, mapped to their actual values */
export type Scalars = {
  ID: { input: string; output: string; }
  String: { input: string; output: string; }
  Boolean: { input: boolean; output: boolean; }
  Int: { input: number; output: number; }
  Float: { input: number; output: number; }
  /** A calendar date, "YYYY-MM-DD". */
  Date: { input: string; output: string; }
  /** An instant. Output: always UTC, "YYYY-MM-DDTHH:MM:SSZ", with the fraction of a second where the upstream gave one ("…:SS.125Z"); the facade's own times (receipts, checks, expiries) are to the second. Input: any RFC 3339 date-time with an offset (Z or +hh:mm); the facade converts it to UTC, to the second, before calling the upstream. */
  DateTime: { input: string; output: string; }
  /** An exact decimal amount in major units, serialized as a string ("12.50"). Never a binary float on the wire. */
  Decimal: { input: string; output: string; }
  /** Any JSON value; payloads are stored and returned untouched. */
  JSON: { input: unknown; output: unknown; }
  /** Federation: an entity representation, any JSON object with `__typename` and the key fields. */
  _Any: { input: unknown; output: unknown; }
};

/** A street address. Coordinates are optional; the upstream derives them from the address when absent. */
export type AddressInput = {
  /** City. */
  city: Scalars['String']['input'];
  /** Country. */
  country: Scalars['String']['input'];
  /** County. */
  county?: InputMaybe<Scalars['String']['input']>;
  /** Latitude, -90 to 90. */
  latitude?: InputMaybe<Scalars['Float']['input']>;
  /** Longitude, -180 to 180. */
  longitude?: InputMaybe<Scalars['Float']['input']>;
  /** House or building number. */
  number?: InputMaybe<Scalars['String']['input']>;
  /** Postal code. */
  postalCode?: InputMaybe<Scalars['String']['input']>;
  /** Apartment, suite or unit. */
  secondaryNumber?: InputMaybe<Scalars['String']['input']>;
  /** State or region. */
  state?: InputMaybe<Scalars['String']['input']>;
  /** Street name. */
  street: Scalars['String']['input'];
};

/** A dropoff address part by part, every part optional: the PARTNER group takes any of them (its document makes the dropoff address fields optional); the PLATFORM group still needs street, city and country. */
export type AddressPartsInput = {
  /** City. */
  city?: InputMaybe<Scalars['String']['input']>;
  /** Country. */
  country?: InputMaybe<Scalars['String']['input']>;
  /** County. */
  county?: InputMaybe<Scalars['String']['input']>;
  /** Latitude, -90 to 90. */
  latitude?: InputMaybe<Scalars['Float']['input']>;
  /** Longitude, -180 to 180. */
  longitude?: InputMaybe<Scalars['Float']['input']>;
  /** House or building number. */
  number?: InputMaybe<Scalars['String']['input']>;
  /** Postal code. */
  postalCode?: InputMaybe<Scalars['String']['input']>;
  /** Apartment, suite or unit. */
  secondaryNumber?: InputMaybe<Scalars['String']['input']>;
  /** State or region. */
  state?: InputMaybe<Scalars['String']['input']>;
  /** Street name. */
  street?: InputMaybe<Scalars['String']['input']>;
};

/** The upstream endpoint group a call goes to. */
export type ApiGroup =
  /** Endpoints directly under /api/v1: quote, read orders by uid or partner_reference, cancel. */
  | 'PARTNER'
  /** Endpoints under /api/v1/{platform}: quote, book, read, cancel deliveries. */
  | 'PLATFORM';

/** One request body for quote and create, on either group. Group-specific rules (required fields, bounds, OVERSIZE needs a vehicle size, style or rawStyle, windows per mode) are checked before any upstream call and reported as a ValidationError with one FieldError per problem. */
export type DeliveryInput = {
  /** Three-letter currency code; required on PARTNER. */
  currency?: InputMaybe<Scalars['String']['input']>;
  /** Declared value in major units: not negative, at most two decimals (sent in UPSTREAM_AMOUNT_UNIT, cents by default). */
  declaredValue?: InputMaybe<Scalars['Decimal']['input']>;
  /** Scheduled date, a UTC date (the upstream reads every date and time in UTC and infers no local time): the UTC date of dropoff.windowStart, so a window at 09:00 on 2 May in Sydney (+10:00) is on 1 May. One that contradicts dropoff.windowStart's UTC date is a ValidationError naming both. Needed when mode is SCHEDULED or not given; left out there, it is taken from dropoff.windowStart. */
  deliveryDate?: InputMaybe<Scalars['Date']['input']>;
  /** End of the delivery window. PARTNER only. */
  deliveryEndTime?: InputMaybe<Scalars['DateTime']['input']>;
  /** Start of the delivery window. PARTNER only. */
  deliveryStartTime?: InputMaybe<Scalars['DateTime']['input']>;
  /** Contents of the package. */
  description?: InputMaybe<Scalars['String']['input']>;
  /** Where the package goes. */
  dropoff: StopInput;
  /** Items in the package. */
  items?: InputMaybe<Array<ItemInput>>;
  /** Number of items. */
  itemsCount?: InputMaybe<Scalars['Int']['input']>;
  /** Smallest vehicle that fits, e.g. CAR, SUV, VAN. Required (any non-blank value) for the OVERSIZE style; whether it is an SUV or larger is for the upstream to judge. */
  minimumVehicleSize?: InputMaybe<Scalars['String']['input']>;
  /** NOW for on demand; SCHEDULED (the default) needs dropoff.windowStart and a deliveryDate (taken from it when not given). */
  mode?: InputMaybe<DeliveryMode>;
  /** Your own reference of the order. PARTNER only. */
  partnerReference?: InputMaybe<Scalars['String']['input']>;
  /** Any JSON object, sent as platform_payload or partner_payload and returned untouched. */
  payload?: InputMaybe<Scalars['JSON']['input']>;
  /** Where the package is collected. */
  pickup: StopInput;
  /** The style exactly as the upstream spells it, for a style enabled for your platform beyond the four documented ones; sent as delivery_style, trimmed, at most 64 characters. Not with style. A documented style named here in any case or separators ("oversize", "special handling") is sent in its documented spelling and follows its rules. */
  rawStyle?: InputMaybe<Scalars['String']['input']>;
  /** Special requirements, e.g. "photo_proof_of_delivery". */
  requirements?: InputMaybe<Array<Scalars['String']['input']>>;
  /** Handling style, one of the four documented ones; STANDARD when neither style nor rawStyle is given. OVERSIZE needs minimumVehicleSize. Not with rawStyle. */
  style?: InputMaybe<DeliveryStyle>;
  /** Courier tip in major units: not negative, at most two decimals (sent in UPSTREAM_AMOUNT_UNIT, cents by default). */
  tip?: InputMaybe<Scalars['Decimal']['input']>;
  /** Package weight. */
  weight?: InputMaybe<Scalars['Float']['input']>;
};

/** When the delivery happens. */
export type DeliveryMode =
  /** On demand: dispatched as soon as possible. */
  | 'NOW'
  /** In the window given by deliveryDate (a UTC date) and the stop windows (the default). */
  | 'SCHEDULED';

/** Normalized lifecycle. Upstream strings ("DROPOFF_COMPLETE", "Picked Up", "Canceled", ...) map onto these case- and separator-insensitively; anything unrecognized is UNKNOWN, never an error. */
export type DeliveryStatus =
  /** A courier has taken the delivery. */
  | 'ASSIGNED'
  /** Canceled by the platform, the service or the provider. Normally final, but a later event or read can revise it: a cancel after pickup is followed by RETURN_IN_PROGRESS and RETURNED, and an event that proves a pickup (pickup_complete, any dropoff_* or return_*), in whatever order it arrives, makes a cancel first seen as one before pickup one after it. When events contradict it, one read of the upstream decides. */
  | 'CANCELED'
  /** Accepted; courier sourcing has started. */
  | 'CREATED'
  /** The courier is at the dropoff; proof of delivery arrives with this milestone. */
  | 'DROPOFF_ARRIVED'
  /** Delivered. Normally final: no event moves it back, and should a later event contradict it (a failure), one read of the upstream settles the status and the read wins. */
  | 'DROPOFF_COMPLETE'
  /** The courier is on the way to the recipient. */
  | 'DROPOFF_ENROUTE'
  /** The delivery could not be completed. Normally final, but a later event or read can revise it: a failure after pickup is followed by RETURN_IN_PROGRESS and RETURNED, and a re-attempt the upstream completes ends at DROPOFF_COMPLETE. When events contradict it, one read of the upstream decides. */
  | 'FAILED'
  /** The courier is at the pickup. */
  | 'PICKUP_ARRIVED'
  /** The package is in the vehicle (upstream "Picked Up"). */
  | 'PICKUP_COMPLETE'
  /** The courier is on the way to the pickup. */
  | 'PICKUP_ENROUTE'
  /** The package is back at the pickup. Normally final: no event moves it back; a read of the upstream that says otherwise wins. */
  | 'RETURNED'
  /** The package is going back to the pickup. */
  | 'RETURN_IN_PROGRESS'
  /** A status the facade does not recognise; rawStatus has the upstream string. */
  | 'UNKNOWN';

/** Handling style of a delivery, as documented by the upstream. */
export type DeliveryStyle =
  /** Routes mixing a scheduled window with on-demand sourcing. */
  | 'HYBRID'
  /** A style enabled for the platform that the facade does not know; Delivery.rawStyle has the string. Read only: to request such a style, send DeliveryInput.rawStyle. */
  | 'OTHER'
  /** Needs an SUV or larger; minimumVehicleSize is required (the upstream judges whether it is large enough). */
  | 'OVERSIZE'
  /** Fragile, temperature-sensitive or high-value goods. */
  | 'SPECIAL_HANDLING'
  /** Everyday parcels one person can carry (the default). */
  | 'STANDARD';

/** One item in the package. */
export type ItemInput = {
  /** Barcode. */
  barcode?: InputMaybe<Scalars['String']['input']>;
  /** Item description. */
  description?: InputMaybe<Scalars['String']['input']>;
  /** The merchant's id of the item. */
  externalId?: InputMaybe<Scalars['String']['input']>;
  /** The merchant's id of this instance of the item. */
  externalInstanceId?: InputMaybe<Scalars['String']['input']>;
  /** Item name. */
  name?: InputMaybe<Scalars['String']['input']>;
  /** Unit price in major units: not negative, at most two decimals (sent in UPSTREAM_ITEM_PRICE_UNIT, which is UPSTREAM_AMOUNT_UNIT unless set, cents by default; read back in the same unit, so Item.price returns it as given). */
  price?: InputMaybe<Scalars['Decimal']['input']>;
  /** How many. */
  quantity?: InputMaybe<Scalars['Float']['input']>;
};

/** The pickup or the dropoff of a request. */
export type StopInput = {
  /** Required for the pickup; for the dropoff on the PLATFORM group (or addressParts with street, city and country). */
  address?: InputMaybe<AddressInput>;
  /** The dropoff only, instead of address: a partial address (e.g. a postal code and a city), which the PARTNER group accepts; on the PLATFORM group street, city and country are still required. */
  addressParts?: InputMaybe<AddressPartsInput>;
  /** Contact email; pickup.email is the required `email` of the upstream body. */
  email?: InputMaybe<Scalars['String']['input']>;
  /** Instructions for the courier; at most 512 characters for the pickup. */
  instructions?: InputMaybe<Scalars['String']['input']>;
  /** Full name of the contact at this stop. */
  name: Scalars['String']['input'];
  /** Contact phone; at most 15 characters for the pickup. */
  phone?: InputMaybe<Scalars['String']['input']>;
  /** Start of the stop window, any offset (sent as UTC). dropoff.windowStart is required unless mode is NOW; its UTC date is the deliveryDate. */
  windowStart?: InputMaybe<Scalars['DateTime']['input']>;
};

export type BookDeliveryMutationVariables = Exact<{
  input: DeliveryInput;
  idempotencyKey?: InputMaybe<Scalars['String']['input']>;
}>;


export type BookDeliveryMutation = { __typename?: 'Mutation', createDelivery:
    | { __typename: 'BookingOutcomeUnknownError', code: string, message: string }
    | { __typename: 'IdempotencyConflictError', code: string, message: string }
    | { __typename: 'MutationCreateDeliverySuccess', data: { __typename?: 'Delivery', uid: string, status: DeliveryStatus, trackingUrl?: string | null } }
    | { __typename: 'ValidationError', code: string, message: string, fields: Array<{ __typename?: 'FieldError', path: string, message: string }> }
   };

export type FollowDeliverySubscriptionVariables = Exact<{
  uid: Scalars['ID']['input'];
}>;


export type FollowDeliverySubscription = { __typename?: 'Subscription', deliveryUpdated: { __typename?: 'DeliveryEvent', status: DeliveryStatus, name: string, receivedAt: string, courierLocation?: { __typename?: 'GeoPoint', lat: number, lng: number } | null } };

export class TypedDocumentString<TResult, TVariables>
  extends String
  implements DocumentTypeDecoration<TResult, TVariables>
{
  __apiType?: NonNullable<DocumentTypeDecoration<TResult, TVariables>['__apiType']>;
  private value: string;
  public __meta__?: Record<string, any> | undefined;

  constructor(value: string, __meta__?: Record<string, any> | undefined) {
    super(value);
    this.value = value;
    this.__meta__ = __meta__;
  }

  override toString(): string & DocumentTypeDecoration<TResult, TVariables> {
    return this.value;
  }
}

export const BookDeliveryDocument = new TypedDocumentString(`
    mutation BookDelivery($input: DeliveryInput!, $idempotencyKey: String) {
  createDelivery(input: $input, idempotencyKey: $idempotencyKey) {
    __typename
    ... on MutationCreateDeliverySuccess {
      data {
        uid
        status
        trackingUrl
      }
    }
    ... on ValidationError {
      fields {
        path
        message
      }
    }
    ... on Error {
      code
      message
    }
  }
}
    `) as unknown as TypedDocumentString<BookDeliveryMutation, BookDeliveryMutationVariables>;
export const FollowDeliveryDocument = new TypedDocumentString(`
    subscription FollowDelivery($uid: ID!) {
  deliveryUpdated(uid: $uid) {
    status
    name
    receivedAt
    courierLocation {
      lat
      lng
    }
  }
}
    `) as unknown as TypedDocumentString<FollowDeliverySubscription, FollowDeliverySubscriptionVariables>;
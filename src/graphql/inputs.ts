// The input types of quote and create, on either group.
import type { DeliveryInput } from '../mapping/request.js';
import { builder } from './builder.js';
import { DeliveryModeEnum, DeliveryStyleEnum } from './enums.js';

const AddressInputRef = builder.inputType('AddressInput', {
  description: 'A street address. Coordinates are optional; the upstream derives them from the address when absent.',
  fields: (t) => ({
    street: t.string({ required: true, description: 'Street name.' }),
    city: t.string({ required: true, description: 'City.' }),
    country: t.string({ required: true, description: 'Country.' }),
    number: t.string({ description: 'House or building number.' }),
    secondaryNumber: t.string({ description: 'Apartment, suite or unit.' }),
    county: t.string({ description: 'County.' }),
    state: t.string({ description: 'State or region.' }),
    postalCode: t.string({ description: 'Postal code.' }),
    latitude: t.float({ description: 'Latitude, -90 to 90.' }),
    longitude: t.float({ description: 'Longitude, -180 to 180.' }),
  }),
});

const AddressPartsInputRef = builder.inputType('AddressPartsInput', {
  description:
    'A dropoff address part by part, every part optional: the PARTNER group takes any of them (its document makes the dropoff address fields optional); the PLATFORM group still needs street, city and country.',
  fields: (t) => ({
    street: t.string({ description: 'Street name.' }),
    city: t.string({ description: 'City.' }),
    country: t.string({ description: 'Country.' }),
    number: t.string({ description: 'House or building number.' }),
    secondaryNumber: t.string({ description: 'Apartment, suite or unit.' }),
    county: t.string({ description: 'County.' }),
    state: t.string({ description: 'State or region.' }),
    postalCode: t.string({ description: 'Postal code.' }),
    latitude: t.float({ description: 'Latitude, -90 to 90.' }),
    longitude: t.float({ description: 'Longitude, -180 to 180.' }),
  }),
});

const StopInputRef = builder.inputType('StopInput', {
  description: 'The pickup or the dropoff of a request.',
  fields: (t) => ({
    name: t.string({ required: true, description: 'Full name of the contact at this stop.' }),
    phone: t.string({ description: 'Contact phone; at most 15 characters for the pickup.' }),
    email: t.string({ description: 'Contact email; pickup.email is the required `email` of the upstream body.' }),
    instructions: t.string({ description: 'Instructions for the courier; at most 512 characters for the pickup.' }),
    address: t.field({
      type: AddressInputRef,
      description:
        'Required for the pickup; for the dropoff on the PLATFORM group (or addressParts with street, city and country).',
    }),
    addressParts: t.field({
      type: AddressPartsInputRef,
      description:
        'The dropoff only, instead of address: a partial address (e.g. a postal code and a city), which the PARTNER group accepts; on the PLATFORM group street, city and country are still required.',
    }),
    windowStart: t.field({
      type: 'DateTime',
      description:
        'Start of the stop window, any offset (sent as UTC). dropoff.windowStart is required unless mode is NOW; its UTC date is the deliveryDate.',
    }),
  }),
});

const ItemInputRef = builder.inputType('ItemInput', {
  description: 'One item in the package.',
  fields: (t) => ({
    name: t.string({ description: 'Item name.' }),
    quantity: t.float({ description: 'How many.' }),
    description: t.string({ description: 'Item description.' }),
    externalId: t.string({ description: "The merchant's id of the item." }),
    externalInstanceId: t.string({ description: "The merchant's id of this instance of the item." }),
    price: t.field({
      type: 'Decimal',
      description:
        'Unit price in major units: not negative, at most two decimals (sent in UPSTREAM_ITEM_PRICE_UNIT, which is UPSTREAM_AMOUNT_UNIT unless set, cents by default; read back in the same unit, so Item.price returns it as given).',
    }),
    barcode: t.string({ description: 'Barcode.' }),
  }),
});

export const DeliveryInputRef = builder.inputRef<DeliveryInput>('DeliveryInput').implement({
  description:
    'One request body for quote and create, on either group. Group-specific rules (required fields, bounds, OVERSIZE needs a vehicle size, style or rawStyle, windows per mode) are checked before any upstream call and reported as a ValidationError with one FieldError per problem.',
  fields: (t) => ({
    pickup: t.field({ type: StopInputRef, required: true, description: 'Where the package is collected.' }),
    dropoff: t.field({ type: StopInputRef, required: true, description: 'Where the package goes.' }),
    mode: t.field({
      type: DeliveryModeEnum,
      description:
        'NOW for on demand; SCHEDULED (the default) needs dropoff.windowStart and a deliveryDate (taken from it when not given).',
    }),
    deliveryDate: t.field({
      type: 'Date',
      description:
        "Scheduled date, a UTC date (the upstream reads every date and time in UTC and infers no local time): the UTC date of dropoff.windowStart, so a window at 09:00 on 2 May in Sydney (+10:00) is on 1 May. One that contradicts dropoff.windowStart's UTC date is a ValidationError naming both. Needed when mode is SCHEDULED or not given; left out there, it is taken from dropoff.windowStart.",
    }),
    deliveryStartTime: t.field({ type: 'DateTime', description: 'Start of the delivery window. PARTNER only.' }),
    deliveryEndTime: t.field({ type: 'DateTime', description: 'End of the delivery window. PARTNER only.' }),
    style: t.field({
      type: DeliveryStyleEnum,
      description:
        'Handling style, one of the four documented ones; STANDARD when neither style nor rawStyle is given. OVERSIZE needs minimumVehicleSize. Not with rawStyle.',
    }),
    rawStyle: t.string({
      description:
        'The style exactly as the upstream spells it, for a style enabled for your platform beyond the four documented ones; sent as delivery_style, trimmed, at most 64 characters. Not with style. A documented style named here in any case or separators ("oversize", "special handling") is sent in its documented spelling and follows its rules.',
    }),
    minimumVehicleSize: t.string({
      description:
        'Smallest vehicle that fits, e.g. CAR, SUV, VAN. Required (any non-blank value) for the OVERSIZE style; whether it is an SUV or larger is for the upstream to judge.',
    }),
    description: t.string({ description: 'Contents of the package.' }),
    requirements: t.stringList({ description: 'Special requirements, e.g. "photo_proof_of_delivery".' }),
    items: t.field({ type: [ItemInputRef], description: 'Items in the package.' }),
    itemsCount: t.int({ description: 'Number of items.' }),
    weight: t.float({ description: 'Package weight.' }),
    declaredValue: t.field({
      type: 'Decimal',
      description:
        'Declared value in major units: not negative, at most two decimals (sent in UPSTREAM_AMOUNT_UNIT, cents by default).',
    }),
    tip: t.field({
      type: 'Decimal',
      description:
        'Courier tip in major units: not negative, at most two decimals (sent in UPSTREAM_AMOUNT_UNIT, cents by default).',
    }),
    currency: t.string({ description: 'Three-letter currency code; required on PARTNER.' }),
    payload: t.field({
      type: 'JSON',
      description: 'Any JSON object, sent as platform_payload or partner_payload and returned untouched.',
    }),
    partnerReference: t.string({ description: 'Your own reference of the order. PARTNER only.' }),
  }),
});

// Small value types shared by deliveries, quotes, cancellations and events.
// Their fields read the same-named properties of the mapping model.
import type { Address, Courier, Distance, GeoPoint, Item, Money, Package, Stop } from '../mapping/model.js';
import { amountFromUpstream } from '../mapping/scalars.js';
import { builder } from './builder.js';

export const MoneyRef = builder.objectRef<Money>('Money').implement({
  description:
    'An exact amount in major units with its currency. An amount the upstream gives without a currency is no Money: the field that would hold it is null (an UPSTREAM_ERROR where it cannot be).',
  fields: (t) => ({
    amount: t.expose('amount', { type: 'Decimal', description: 'The amount in major units, e.g. "12.50".' }),
    currency: t.exposeString('currency', {
      description: 'ISO 4217 currency code as the upstream gives it, e.g. "USD".',
    }),
  }),
});

export const DistanceRef = builder.objectRef<Distance>('Distance').implement({
  description: 'A distance as measured by the upstream.',
  fields: (t) => ({
    value: t.exposeFloat('value', { description: 'The distance in `unit`.' }),
    unit: t.exposeString('unit', {
      nullable: true,
      description: 'Unit of `value`, e.g. "km"; null where the upstream gives none (quotes).',
    }),
  }),
});

export const GeoPointRef = builder.objectRef<GeoPoint>('GeoPoint').implement({
  description: 'A WGS 84 position.',
  fields: (t) => ({
    lat: t.exposeFloat('lat', { description: 'Latitude in degrees.' }),
    lng: t.exposeFloat('lng', { description: 'Longitude in degrees.' }),
  }),
});

export const AddressRef = builder.objectRef<Address>('Address').implement({
  description: 'A street address; any part may be missing.',
  fields: (t) => ({
    street: t.exposeString('street', { nullable: true, description: 'Street name.' }),
    number: t.exposeString('number', { nullable: true, description: 'House or building number.' }),
    secondaryNumber: t.exposeString('secondaryNumber', { nullable: true, description: 'Apartment, suite or unit.' }),
    city: t.exposeString('city', { nullable: true, description: 'City.' }),
    county: t.exposeString('county', { nullable: true, description: 'County.' }),
    state: t.exposeString('state', { nullable: true, description: 'State or region.' }),
    postalCode: t.exposeString('postalCode', { nullable: true, description: 'Postal code.' }),
    country: t.exposeString('country', { nullable: true, description: 'Country.' }),
    latitude: t.exposeFloat('latitude', { nullable: true, description: 'Latitude of the address, where known.' }),
    longitude: t.exposeFloat('longitude', { nullable: true, description: 'Longitude of the address, where known.' }),
  }),
});

export const StopRef = builder.objectRef<Stop>('Stop').implement({
  description: 'The pickup or the dropoff: who, where, and from when.',
  fields: (t) => ({
    name: t.exposeString('name', { nullable: true, description: 'Full name of the contact at this stop.' }),
    phone: t.exposeString('phone', { nullable: true, description: 'Contact phone.' }),
    email: t.exposeString('email', {
      nullable: true,
      description: 'Contact email (`email` for pickup, `dropoff_email` for dropoff).',
    }),
    instructions: t.exposeString('instructions', { nullable: true, description: 'Instructions for the courier.' }),
    address: t.expose('address', { type: AddressRef, nullable: true, description: 'Where the stop is.' }),
    windowStart: t.expose('windowStart', {
      type: 'DateTime',
      nullable: true,
      description: 'Start of the stop window (pickup_start_time / dropoff_start_time).',
    }),
  }),
});

const VehicleRef = builder.objectRef<NonNullable<Courier['vehicle']>>('Vehicle').implement({
  description: "The courier's vehicle.",
  fields: (t) => ({
    make: t.exposeString('make', { nullable: true, description: 'Manufacturer.' }),
    model: t.exposeString('model', { nullable: true, description: 'Model.' }),
    year: t.exposeInt('year', { nullable: true, description: 'Manufacturing year.' }),
  }),
});

export const CourierRef = builder.objectRef<Courier>('Courier').implement({
  description: 'The courier assigned to a delivery.',
  fields: (t) => ({
    id: t.exposeString('id', {
      nullable: true,
      description:
        "The delivery service's id of the courier (driver_id, a number, given as a string), which tells a new courier from the previous one when a delivery is reassigned. Webhook events carry it; the service's reads keep it reserved, so it is null on a delivery read from the service and where an event names none.",
    }),
    name: t.exposeString('name', { nullable: true, description: "Courier's full name." }),
    pickupPhone: t.exposeString('pickupPhone', {
      nullable: true,
      description: 'Courier phone for pickup-related contact.',
    }),
    dropoffPhone: t.exposeString('dropoffPhone', {
      nullable: true,
      description: 'Courier phone for dropoff-related contact.',
    }),
    vehicle: t.expose('vehicle', { type: VehicleRef, nullable: true, description: "The courier's vehicle." }),
    location: t.expose('location', { type: GeoPointRef, nullable: true, description: 'Last known GPS position.' }),
  }),
});

const DimensionsRef = builder.objectRef<NonNullable<Package['dimensions']>>('Dimensions').implement({
  description: 'Package dimensions (read from `dimensions`, or the partner group’s `dimentions`).',
  fields: (t) => ({
    height: t.exposeFloat('height', { nullable: true, description: 'Height.' }),
    length: t.exposeFloat('length', { nullable: true, description: 'Length.' }),
    width: t.exposeFloat('width', { nullable: true, description: 'Width.' }),
  }),
});

const ItemRef = builder.objectRef<Item>('Item').implement({
  description: 'One item in the package.',
  fields: (t) => ({
    name: t.exposeString('name', { nullable: true, description: 'Item name.' }),
    quantity: t.exposeFloat('quantity', { nullable: true, description: 'How many.' }),
    description: t.exposeString('description', { nullable: true, description: 'Item description.' }),
    externalId: t.exposeString('externalId', { nullable: true, description: "The merchant's id of the item." }),
    externalInstanceId: t.exposeString('externalInstanceId', {
      nullable: true,
      description: "The merchant's id of this instance of the item.",
    }),
    price: t.field({
      type: 'Decimal',
      nullable: true,
      description:
        'Unit price in major units. Item prices are sent to the delivery service in UPSTREAM_ITEM_PRICE_UNIT (UPSTREAM_AMOUNT_UNIT unless set; cents by default) and read back in that same unit, so a price comes back as it was given.',
      // The upstream gives an item back as it was sent: its price in the unit it went out in.
      resolve: (item, _args, ctx) => amountFromUpstream(item.price, ctx.services.config.upstream.itemPriceUnit),
    }),
    barcode: t.exposeString('barcode', { nullable: true, description: 'Barcode.' }),
    extra: t.field({
      type: 'JSON',
      nullable: true,
      description:
        'What the delivery service sent for this item beyond the fields above, as it sent it (its document lists seven keys; an item may carry more); null when nothing.',
      resolve: (item) => item.extra,
    }),
  }),
});

export const PackageRef = builder.objectRef<Package>('Package').implement({
  description: 'What is being delivered.',
  fields: (t) => ({
    description: t.exposeString('description', { nullable: true, description: 'Contents.' }),
    minimumVehicleSize: t.exposeString('minimumVehicleSize', {
      nullable: true,
      description: 'Smallest vehicle that fits, e.g. CAR, SUV.',
    }),
    requirements: t.exposeStringList('requirements', {
      description: 'Special requirements, e.g. "photo_proof_of_delivery".',
    }),
    itemsCount: t.exposeInt('itemsCount', { nullable: true, description: 'Number of items.' }),
    items: t.expose('items', { type: [ItemRef], nullable: true, description: 'Items in the package.' }),
    weight: t.exposeFloat('weight', { nullable: true, description: 'Package weight.' }),
    dimensions: t.expose('dimensions', { type: DimensionsRef, nullable: true, description: 'Package dimensions.' }),
    declaredValue: t.expose('declaredValue', {
      type: 'Decimal',
      nullable: true,
      description: 'Declared value in major units.',
    }),
  }),
});

export const ProofOfDeliveryRef = builder
  .objectRef<{ photoUrl: string | null; signatureUrl: string | null }>('ProofOfDelivery')
  .implement({
    description: 'Proof collected at the dropoff.',
    fields: (t) => ({
      photoUrl: t.exposeString('photoUrl', {
        nullable: true,
        description: 'Photo proof (dropoff_verification_image_url).',
      }),
      signatureUrl: t.exposeString('signatureUrl', {
        nullable: true,
        description: 'Signature proof (dropoff_signature_image_url).',
      }),
    }),
  });

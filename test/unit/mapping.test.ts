// The REST → model mapping and the model → REST request mapping, against the
// shapes upstream-api.md documents and the rules CONTRACT.md states.
import { describe, expect, it } from 'vitest';
import { UpstreamValidationError, ValidationError, type FieldProblem } from '../../src/errors.js';
import { fromPartnerOrder, fromPlatformDelivery, fromWebhookEvent } from '../../src/mapping/delivery.js';
import type { Delivery } from '../../src/mapping/model.js';
import { quoteFromWire } from '../../src/mapping/quote.js';
import {
  toWireRequest,
  validateDeliveryInput,
  validationErrorFromUpstream,
  type DeliveryInput,
} from '../../src/mapping/request.js';
import { calendarDate, decimalFrom, utcDateTime } from '../../src/mapping/scalars.js';
import { deliveryStatus, statusOfEvent } from '../../src/domain/status.js';
import { deliveryStyle } from '../../src/mapping/status.js';
import type { WireDelivery, WireOrder, WireWebhookEvent } from '../../src/upstream/wire.js';

// ------------------------------------------------------------------ fixtures

/** A platform-group Delivery as `GET /{platform}/deliveries/{uid}` returns it, every documented field set. */
function platformDelivery(): WireDelivery {
  return {
    uid: '6f1c2a9e-3b7d-4c8e-9a10-2b3c4d5e6f70',
    status: 'DROPOFF_COMPLETE',
    price: { value: 17.35, currency: 'USD' },
    distance: { value: 4.2, unit: 'mi' },
    pickup_name: 'Priya Patel',
    dropoff_name: 'Diego Alvarez',
    delivery_date: '2026-05-01T00:00:00+00:00',
    driver_id: null,
    driver_name: 'Carla Mendes',
    driver_location: { lat: 40.7411, lng: -73.9897 },
    driver_pickup_phone_number: '+12125550101',
    driver_dropoff_phone_number: '+12125550102',
    driver_vehicle_make: 'Toyota',
    driver_vehicle_model: 'Prius',
    driver_vehicle_year: 2021,
    dropoff_time_estimated: '2026-05-01T15:45:00+00:00',
    pickup_address_street: 'Broadway',
    pickup_address_city: 'New York',
    pickup_address_country: 'US',
    pickup_address_number: '1250',
    pickup_address_secondary_number: 'Suite 4',
    pickup_address_county: 'New York County',
    pickup_address_state: 'NY',
    pickup_address_postal_code: '10001',
    pickup_address_latitude: 40.7484,
    pickup_address_longitude: -73.9878,
    dropoff_address_street: 'Atlantic Avenue',
    dropoff_address_city: 'Brooklyn',
    dropoff_address_country: 'US',
    dropoff_address_number: '300',
    dropoff_address_secondary_number: 'Apt 2B',
    dropoff_address_county: 'Kings County',
    dropoff_address_state: 'NY',
    dropoff_address_postal_code: '11201',
    dropoff_address_latitude: 40.6881,
    dropoff_address_longitude: -73.9867,
    pickup_phone_number: '+12125550111',
    dropoff_phone_number: '+17185550122',
    pickup_instructions: 'Front desk, ask for Priya',
    dropoff_instructions: 'Leave with the doorman',
    email: 'priya@shop.example',
    dropoff_email: 'diego@home.example',
    package_description: 'Two boxes of books',
    package_minimum_vehicle_size: 'CAR',
    package_delivery_mode: 'SCHEDULED',
    package_requirements: ['photo_proof_of_delivery'],
    items_count: 2,
    items: [
      {
        name: 'Atlas',
        quantity: 2,
        description: 'Hardcover',
        external_id: 'sku-1',
        external_instance_id: 'sku-1-a',
        price: 24.99,
        barcode: '9780000000001',
      },
    ],
    weight: 6.5,
    dimensions: { height: 20, length: 40, width: 30 },
    package_value: 49.98,
    pickup_start_time: '2026-05-01T14:00:00+00:00',
    dropoff_start_time: '2026-05-01T15:00:00+00:00',
    delivery_end_time: '2026-05-01T16:00:00+00:00',
    dropoff_verification_image_url: 'https://proof.example/photo/6f1c.jpg',
    dropoff_signature_image_url: 'https://proof.example/signature/6f1c.png',
    cancellation_reason: null,
    tip: 3.5,
    delivery_style: 'Standard',
    platform_payload: { merchantId: 'm-42', order: { id: 7, lines: [1, 2] } },
    tracking_link: 'https://track.example/6f1c2a9e',
    expected_cancellation_fee: { amount: '0.00', currency: 'USD' },
  };
}

/** A partner-group Order as `GET /orders/partner/{ref}` returns it (with delivery_style). */
function partnerOrder(): WireOrder {
  const { dimensions, platform_payload, tracking_link, expected_cancellation_fee, ...shared } = platformDelivery();
  void [platform_payload, tracking_link, expected_cancellation_fee];
  return {
    ...shared,
    uid: 'a0b1c2d3-0000-4000-8000-000000000042',
    status: 'Canceled',
    cancellation_reason: 'Customer changed their mind',
    partner_reference: 'PO-2026-0042',
    partner_payload: { partnerOrder: 'PO-2026-0042', channel: 'web' },
    delivery_start_time: '2026-05-01T13:30:00+00:00',
    dimentions: dimensions!,
    tracking_url: 'https://track.example/orders/a0b1c2d3',
    expected_cancelation_fee: { amount: '4.75', currency: 'USD' },
    delivery_style: 'Special Handling',
  };
}

/** A webhook body (the JWT's `payload` claim) for `delivery.pickup_complete`. */
function webhookEvent(): WireWebhookEvent {
  return {
    uid: '6f1c2a9e-3b7d-4c8e-9a10-2b3c4d5e6f70',
    event_name: 'delivery.pickup_complete',
    status: 'Picked Up',
    platform_payload: { merchantId: 'm-42' },
    price: { value: 17.35, currency: 'USD' },
    distance: { value: 4.2, unit: 'mi' },
    tip: 3.5,
    pickup_name: 'Priya Patel',
    pickup_phone_number: '+12125550111',
    pickup_instructions: 'Front desk, ask for Priya',
    email: 'priya@shop.example',
    pickup_address: {
      street: 'Broadway',
      number: '1250',
      city: 'New York',
      county: 'New York County',
      state: 'NY',
      postal_code: '10001',
      country: 'US',
      latitude: 40.7484,
      longitude: -73.9878,
    },
    dropoff_address: {
      street: 'Atlantic Avenue',
      number: '300',
      city: 'Brooklyn',
      county: 'Kings County',
      state: 'NY',
      postal_code: '11201',
      country: 'US',
      latitude: 40.6881,
      longitude: -73.9867,
    },
    dropoff_name: 'Diego Alvarez',
    dropoff_phone_number: '+17185550122',
    dropoff_instructions: 'Leave with the doorman',
    driver_id: 4812,
    driver_name: 'Carla Mendes',
    driver_location: { lat: 40.7411, lng: -73.9897 },
    driver_pickup_phone_number: '+12125550101',
    driver_dropoff_phone_number: '+12125550102',
    driver_vehicle_make: 'Toyota',
    driver_vehicle_model: 'Prius',
    driver_vehicle_year: 2021,
    dropoff_time_estimated: '2026-05-01T15:45:00+00:00',
    delivery_date: '2026-05-01',
    pickup_start_time: '2026-05-01T14:00:00+00:00',
    dropoff_start_time: '2026-05-01T15:00:00+00:00',
    delivery_start_time: '2026-05-01T13:30:00+00:00',
    delivery_end_time: '2026-05-01T16:00:00+00:00',
    package_description: 'Two boxes of books',
    package_minimum_vehicle_size: 'CAR',
    package_delivery_mode: 'NOW',
    package_requirements: ['photo_proof_of_delivery'],
    package_value: 49.98,
    items_count: 2,
    items: [{ name: 'Atlas', quantity: 2 }],
    weight: 6.5,
    dropoff_verification_image_url: null,
    dropoff_signature_image_url: null,
    cancellation_reason: null,
  };
}

const NYC_PICKUP = {
  street: 'Broadway',
  number: '1250',
  secondaryNumber: 'Suite 4',
  city: 'New York',
  county: 'New York County',
  state: 'NY',
  postalCode: '10001',
  country: 'US',
  latitude: 40.7484,
  longitude: -73.9878,
};

/** Never fed through a float: no digit run after a decimal point of 10 or more. */
const FLOAT_ARTIFACT = /\d\.\d{10,}/;

// ------------------------------------------------------------------ reads

describe('fromPlatformDelivery', () => {
  const delivery = fromPlatformDelivery(platformDelivery());

  it('maps every documented field onto the one Delivery model', () => {
    expect(delivery).toEqual<Delivery>({
      uid: '6f1c2a9e-3b7d-4c8e-9a10-2b3c4d5e6f70',
      group: 'PLATFORM',
      status: 'DROPOFF_COMPLETE',
      rawStatus: 'DROPOFF_COMPLETE',
      price: { amount: '17.35', currency: 'USD' },
      tip: '3.50',
      distance: { value: 4.2, unit: 'mi' },
      pickup: {
        name: 'Priya Patel',
        phone: '+12125550111',
        email: 'priya@shop.example',
        instructions: 'Front desk, ask for Priya',
        address: NYC_PICKUP,
        windowStart: '2026-05-01T14:00:00Z',
      },
      dropoff: {
        name: 'Diego Alvarez',
        phone: '+17185550122',
        email: 'diego@home.example',
        instructions: 'Leave with the doorman',
        address: {
          street: 'Atlantic Avenue',
          number: '300',
          secondaryNumber: 'Apt 2B',
          city: 'Brooklyn',
          county: 'Kings County',
          state: 'NY',
          postalCode: '11201',
          country: 'US',
          latitude: 40.6881,
          longitude: -73.9867,
        },
        windowStart: '2026-05-01T15:00:00Z',
      },
      deliveryDate: '2026-05-01',
      scheduledAt: '2026-05-01T00:00:00Z',
      deliveryStartTime: null,
      deliveryEndTime: '2026-05-01T16:00:00Z',
      estimatedDropoffAt: '2026-05-01T15:45:00Z',
      mode: 'SCHEDULED',
      style: 'STANDARD',
      rawStyle: 'Standard',
      package: {
        description: 'Two boxes of books',
        minimumVehicleSize: 'CAR',
        requirements: ['photo_proof_of_delivery'],
        itemsCount: 2,
        items: [
          {
            name: 'Atlas',
            quantity: 2,
            description: 'Hardcover',
            externalId: 'sku-1',
            externalInstanceId: 'sku-1-a',
            price: '24.99',
            barcode: '9780000000001',
            extra: null,
          },
        ],
        weight: 6.5,
        dimensions: { height: 20, length: 40, width: 30 },
        declaredValue: '49.98',
      },
      courier: {
        id: null,
        name: 'Carla Mendes',
        pickupPhone: '+12125550101',
        dropoffPhone: '+12125550102',
        vehicle: { make: 'Toyota', model: 'Prius', year: 2021 },
        location: { lat: 40.7411, lng: -73.9897 },
      },
      proofOfDelivery: {
        photoUrl: 'https://proof.example/photo/6f1c.jpg',
        signatureUrl: 'https://proof.example/signature/6f1c.png',
      },
      cancellationReason: null,
      expectedCancellationFee: { amount: '0.00', currency: 'USD' },
      trackingUrl: 'https://track.example/6f1c2a9e',
      payload: { merchantId: 'm-42', order: { id: 7, lines: [1, 2] } },
      partnerReference: null,
    });
  });

  it('returns platform_payload untouched as payload', () => {
    expect(delivery.payload).toStrictEqual(platformDelivery().platform_payload);
  });

  it('keeps no float artifacts anywhere in the mapped delivery', () => {
    expect(JSON.stringify(delivery)).not.toMatch(FLOAT_ARTIFACT);
  });
});

describe('fromPartnerOrder', () => {
  const order = fromPartnerOrder(partnerOrder());

  it('reads the partner spellings: dimentions, tracking_url, expected_cancelation_fee, partner_payload', () => {
    expect(order.package.dimensions).toEqual({ height: 20, length: 40, width: 30 });
    expect(order.trackingUrl).toBe('https://track.example/orders/a0b1c2d3');
    expect(order.expectedCancellationFee).toEqual({ amount: '4.75', currency: 'USD' });
    expect(order.payload).toStrictEqual({ partnerOrder: 'PO-2026-0042', channel: 'web' });
  });

  it('adds the partner-only fields and marks the group', () => {
    expect(order.group).toBe('PARTNER');
    expect(order.partnerReference).toBe('PO-2026-0042');
    expect(order.deliveryStartTime).toBe('2026-05-01T13:30:00Z');
    expect(order.style).toBe('SPECIAL_HANDLING');
    expect(order.rawStyle).toBe('Special Handling');
    expect(order.status).toBe('CANCELED');
    expect(order.rawStatus).toBe('Canceled');
    expect(order.cancellationReason).toBe('Customer changed their mind');
  });

  it('reads the flat address fields into pickup.address and dropoff.address', () => {
    expect(order.pickup.address).toEqual(NYC_PICKUP);
    expect(order.dropoff.address?.city).toBe('Brooklyn');
    expect(order.dropoff.address?.secondaryNumber).toBe('Apt 2B');
  });

  it('takes those values from the partner spellings: without them they are empty', () => {
    const { tracking_url, dimentions, expected_cancelation_fee, ...rest } = partnerOrder();
    void [tracking_url, dimentions, expected_cancelation_fee];
    const bare = fromPartnerOrder(rest);
    expect(bare.trackingUrl).toBeNull();
    expect(bare.package.dimensions).toBeNull();
    expect(bare.expectedCancellationFee).toBeNull();
  });

  it('has no style on the read by uid, which omits delivery_style', () => {
    const { delivery_style, ...byUid } = partnerOrder();
    void delivery_style;
    const mapped = fromPartnerOrder(byUid);
    expect(mapped.style).toBeNull();
    expect(mapped.rawStyle).toBeNull();
  });

  it('does not take a platform_payload for the partner payload', () => {
    const wire = { ...partnerOrder(), partner_payload: null, platform_payload: { wrong: true } } as WireOrder;
    expect(fromPartnerOrder(wire).payload).toBeNull();
  });

  it('keeps no float artifacts anywhere in the mapped order', () => {
    expect(JSON.stringify(order)).not.toMatch(FLOAT_ARTIFACT);
  });
});

describe('fromWebhookEvent', () => {
  const event = fromWebhookEvent(webhookEvent());

  it('reads the nested pickup_address and dropoff_address objects into pickup.address and dropoff.address', () => {
    expect(event.pickup.address).toEqual({ ...NYC_PICKUP, secondaryNumber: null });
    expect(event.dropoff.address).toEqual({
      street: 'Atlantic Avenue',
      number: '300',
      secondaryNumber: null,
      city: 'Brooklyn',
      county: 'Kings County',
      state: 'NY',
      postalCode: '11201',
      country: 'US',
      latitude: 40.6881,
      longitude: -73.9867,
    });
  });

  it('gives the same pickup.address as the flat fields of a read of the same delivery', () => {
    const read = fromPlatformDelivery({ ...platformDelivery(), pickup_address_secondary_number: null });
    expect(event.pickup.address).toEqual(read.pickup.address);
  });

  it('maps the human-readable status, the courier, the times and the payload', () => {
    expect(event.uid).toBe('6f1c2a9e-3b7d-4c8e-9a10-2b3c4d5e6f70');
    expect(event.group).toBe('PLATFORM');
    expect(event.status).toBe('PICKUP_COMPLETE');
    expect(event.rawStatus).toBe('Picked Up');
    expect(event.courier).toEqual({
      // driver_id is a number on webhooks; the schema gives it as a string.
      id: '4812',
      name: 'Carla Mendes',
      pickupPhone: '+12125550101',
      dropoffPhone: '+12125550102',
      vehicle: { make: 'Toyota', model: 'Prius', year: 2021 },
      location: { lat: 40.7411, lng: -73.9897 },
    });
    expect(event.deliveryDate).toBe('2026-05-01');
    expect(event.deliveryStartTime).toBe('2026-05-01T13:30:00Z');
    expect(event.deliveryEndTime).toBe('2026-05-01T16:00:00Z');
    expect(event.estimatedDropoffAt).toBe('2026-05-01T15:45:00Z');
    expect(event.pickup.windowStart).toBe('2026-05-01T14:00:00Z');
    expect(event.dropoff.windowStart).toBe('2026-05-01T15:00:00Z');
    expect(event.mode).toBe('NOW');
    expect(event.price).toEqual({ amount: '17.35', currency: 'USD' });
    expect(event.tip).toBe('3.50');
    expect(event.package.declaredValue).toBe('49.98');
    expect(event.payload).toStrictEqual({ merchantId: 'm-42' });
  });

  it('has a proof of delivery only on the event that carries the URLs', () => {
    expect(event.proofOfDelivery).toBeNull();
    const arrived = fromWebhookEvent({
      ...webhookEvent(),
      event_name: 'delivery.dropoff_arrived',
      dropoff_verification_image_url: 'https://proof.example/photo.jpg',
    });
    expect(arrived.proofOfDelivery).toEqual({ photoUrl: 'https://proof.example/photo.jpg', signatureUrl: null });
  });

  it('has no address when the nested object is omitted (the webhook omits empty ones)', () => {
    const { pickup_address, dropoff_address, ...rest } = webhookEvent();
    void [pickup_address, dropoff_address];
    const mapped = fromWebhookEvent(rest);
    expect(mapped.pickup.address).toBeNull();
    expect(mapped.dropoff.address).toBeNull();
    expect(mapped.pickup.name).toBe('Priya Patel');
  });

  it('has no price while price.value is null (pricing not settled)', () => {
    expect(fromWebhookEvent({ ...webhookEvent(), price: { value: null, currency: 'USD' } }).price).toBeNull();
  });

  it('has no price, never a currency of "", while no currency is given for it', () => {
    for (const currency of [undefined, null, ''])
      expect(fromWebhookEvent({ ...webhookEvent(), price: { value: 12.5, currency } as never }).price).toBeNull();
    const fee = { amount: '2.50' };
    expect(fromPlatformDelivery({ ...platformDelivery(), expected_cancellation_fee: fee as never })).toMatchObject({
      expectedCancellationFee: null,
    });
    expect(fromWebhookEvent({ ...webhookEvent(), price: { value: 12.5, currency: 'EUR' } }).price).toEqual({
      amount: '12.50',
      currency: 'EUR',
    });
  });

  it('carries cancellation_reason on delivery.canceled', () => {
    const canceled = fromWebhookEvent({
      ...webhookEvent(),
      event_name: 'delivery.canceled',
      status: 'Cancelled',
      cancellation_reason: 'Store closed',
    });
    expect(canceled.status).toBe('CANCELED');
    expect(canceled.cancellationReason).toBe('Store closed');
  });
});

describe('courier, proof of delivery, absent and null', () => {
  const unassigned = (): WireDelivery => {
    const {
      driver_name,
      driver_location,
      driver_pickup_phone_number,
      driver_dropoff_phone_number,
      driver_vehicle_make,
      driver_vehicle_model,
      driver_vehicle_year,
      ...rest
    } = platformDelivery();
    void [
      driver_name,
      driver_location,
      driver_pickup_phone_number,
      driver_dropoff_phone_number,
      driver_vehicle_make,
      driver_vehicle_model,
      driver_vehicle_year,
    ];
    return { ...rest, status: 'CREATED' };
  };

  it('has no courier until one is assigned (driver_id stays reserved and null)', () => {
    expect(fromPlatformDelivery(unassigned()).courier).toBeNull();
    expect(fromPlatformDelivery({ ...unassigned(), driver_id: null }).courier).toBeNull();
  });

  it('has a courier as soon as any courier field is set', () => {
    const courier = fromPlatformDelivery({ ...unassigned(), driver_name: 'Carla Mendes' }).courier;
    expect(courier).toEqual({
      id: null,
      name: 'Carla Mendes',
      pickupPhone: null,
      dropoffPhone: null,
      vehicle: null,
      location: null,
    });
    expect(
      fromWebhookEvent({ uid: 'u', event_name: 'location.assigned_driver', driver_location: { lat: 1.5, lng: 2.5 } })
        .courier?.location,
    ).toEqual({ lat: 1.5, lng: 2.5 });
  });

  it('has no proof of delivery without either URL', () => {
    expect(
      fromPlatformDelivery({
        ...platformDelivery(),
        dropoff_verification_image_url: null,
        dropoff_signature_image_url: null,
      }).proofOfDelivery,
    ).toBeNull();
    const signatureOnly = fromPlatformDelivery({
      ...platformDelivery(),
      dropoff_verification_image_url: undefined,
      dropoff_signature_image_url: 'https://s.example/x.png',
    });
    expect(signatureOnly.proofOfDelivery).toEqual({ photoUrl: null, signatureUrl: 'https://s.example/x.png' });
  });

  it('reads an absent field and a null field the same, for every optional field of all three shapes', () => {
    const cases: Array<[string, Record<string, unknown>, (wire: never) => Delivery]> = [
      [
        'platform',
        platformDelivery() as unknown as Record<string, unknown>,
        fromPlatformDelivery as (wire: never) => Delivery,
      ],
      ['partner', partnerOrder() as unknown as Record<string, unknown>, fromPartnerOrder as (wire: never) => Delivery],
      ['webhook', webhookEvent() as unknown as Record<string, unknown>, fromWebhookEvent as (wire: never) => Delivery],
    ];
    for (const [, wire, map] of cases) {
      const kept = (key: string) => key === 'uid' || key === 'event_name';
      const allNull = Object.fromEntries(Object.keys(wire).map((key) => [key, kept(key) ? wire[key] : null]));
      const allAbsent = Object.fromEntries(
        Object.keys(wire)
          .filter(kept)
          .map((key) => [key, wire[key]]),
      );
      const fromNull = map(allNull as never);
      expect(fromNull).toEqual(map(allAbsent as never));
      expect(fromNull.pickup.address).toBeNull();
      expect(fromNull.courier).toBeNull();
      expect(fromNull.price).toBeNull();
      // A webhook's status comes from its event_name (kept), never from the null label.
      expect(fromNull.status).toBe(typeof wire.event_name === 'string' ? statusOfEvent(wire.event_name) : 'UNKNOWN');
      expect(fromNull.package.requirements).toEqual([]);
      expect(fromNull.package.items).toBeNull();
      expect(fromNull.payload).toBeNull();
    }
  });

  it('reads numbers that arrive as numeric strings as numbers', () => {
    const loose = {
      ...platformDelivery(),
      pickup_address_latitude: '40.7484',
      pickup_address_longitude: '-73.9878',
      weight: '6.5',
      items_count: '2',
      driver_vehicle_year: '2021',
      driver_location: { lat: '40.7411', lng: '-73.9897' },
      distance: { value: '4.2', unit: 'mi' },
      dimensions: { height: '20', length: '40', width: '30' },
      price: { value: '17.35', currency: 'USD' },
      tip: '3.5',
      package_value: '49.98',
    } as unknown as WireDelivery;
    const mapped = fromPlatformDelivery(loose);
    expect(mapped.pickup.address?.latitude).toBe(40.7484);
    expect(mapped.pickup.address?.longitude).toBe(-73.9878);
    expect(mapped.package.weight).toBe(6.5);
    expect(mapped.package.itemsCount).toBe(2);
    expect(mapped.courier?.vehicle?.year).toBe(2021);
    expect(mapped.courier?.location).toEqual({ lat: 40.7411, lng: -73.9897 });
    expect(mapped.distance).toEqual({ value: 4.2, unit: 'mi' });
    expect(mapped.package.dimensions).toEqual({ height: 20, length: 40, width: 30 });
    expect(mapped.price).toEqual({ amount: '17.35', currency: 'USD' });
    expect(mapped.tip).toBe('3.50');
    expect(mapped.package.declaredValue).toBe('49.98');
    expect(mapped).toEqual(fromPlatformDelivery(platformDelivery()));
  });

  it('reads a non-numeric string in a number field as no value', () => {
    const mapped = fromPlatformDelivery({
      ...platformDelivery(),
      weight: 'heavy',
      pickup_address_latitude: 'north',
    } as unknown as WireDelivery);
    expect(mapped.package.weight).toBeNull();
    expect(mapped.pickup.address?.latitude).toBeNull();
  });

  it('ignores unknown fields', () => {
    const extra = { ...platformDelivery(), surprise_field: { deep: 1 }, driver_rating: 4.9 } as WireDelivery;
    expect(fromPlatformDelivery(extra)).toEqual(fromPlatformDelivery(platformDelivery()));
  });
});

// ------------------------------------------------------------------ money

describe('money', () => {
  const priced = (value: unknown) =>
    fromPlatformDelivery({ ...platformDelivery(), price: { value, currency: 'USD' } } as WireDelivery).price;

  it('drops the 0.1 + 0.2 float artifact', () => {
    expect(0.1 + 0.2).toBe(0.30000000000000004);
    expect(priced(0.1 + 0.2)).toEqual({ amount: '0.30', currency: 'USD' });
    expect(decimalFrom(0.1 + 0.2)).toBe('0.30');
    expect(decimalFrom(0.1 + 0.7)).toBe('0.80');
    expect(decimalFrom(1.1 * 1.1)).toBe('1.21');
  });

  it('shows at least two decimals', () => {
    expect(priced(12.5)?.amount).toBe('12.50');
    expect(priced(12)?.amount).toBe('12.00');
    expect(priced(0)?.amount).toBe('0.00');
    expect(decimalFrom(-3.5)).toBe('-3.50');
  });

  it('keeps a decimal string exactly', () => {
    expect(decimalFrom('2.50')).toBe('2.50');
    expect(decimalFrom('2.5')).toBe('2.50');
    expect(decimalFrom('0.125')).toBe('0.125');
    expect(decimalFrom('98765432109876543.21')).toBe('98765432109876543.21');
    const fee = fromPlatformDelivery({
      ...platformDelivery(),
      expected_cancellation_fee: { amount: '2.50', currency: 'EUR' },
    }).expectedCancellationFee;
    expect(fee).toEqual({ amount: '2.50', currency: 'EUR' });
  });

  it('keeps large amounts exact', () => {
    expect(decimalFrom(1234567.89)).toBe('1234567.89');
    expect(decimalFrom(99999999.99)).toBe('99999999.99');
    expect(decimalFrom(1000000000000.01)).toBe('1000000000000.01');
    // 16 significant digits: a cents value the upstream converted, not an artifact.
    expect(decimalFrom(12345678901234.56)).toBe('12345678901234.56');
    expect(decimalFrom(250000000)).toBe('250000000.00');
  });

  it('refuses what is not an amount', () => {
    for (const value of ['', 'abc', '1,50', '$3', null, undefined, NaN, Infinity, {}, []])
      expect(decimalFrom(value)).toBeNull();
  });

  it('maps every amount of a read through decimals: tip, declared value, item price, fees', () => {
    const mapped = fromPartnerOrder({
      ...partnerOrder(),
      price: { value: 0.1 + 0.2, currency: 'USD' },
      tip: 1.1 + 2.2,
      package_value: 0.7 + 0.1,
      items: [{ name: 'x', price: 0.1 * 3 }],
      expected_cancelation_fee: { amount: '1.10', currency: 'USD' },
    });
    expect(mapped.price?.amount).toBe('0.30');
    expect(mapped.tip).toBe('3.30');
    expect(mapped.package.declaredValue).toBe('0.80');
    expect(mapped.package.items?.[0]?.price).toBe('0.30');
    expect(mapped.expectedCancellationFee?.amount).toBe('1.10');
    const json = JSON.stringify(mapped);
    expect(json).not.toMatch(FLOAT_ARTIFACT);
    expect(json).not.toContain('0.30000000000000004');
  });
});

// ------------------------------------------------------------------ times

describe('times', () => {
  const at = (value: string) =>
    fromPlatformDelivery({ ...platformDelivery(), dropoff_time_estimated: value }).estimatedDropoffAt;

  it('writes +00:00 as Z', () => {
    expect(at('2026-05-01T14:30:00+00:00')).toBe('2026-05-01T14:30:00Z');
    expect(at('2026-05-01T14:30:00Z')).toBe('2026-05-01T14:30:00Z');
  });

  it('converts other offsets to UTC', () => {
    expect(at('2026-05-01T14:30:00+02:00')).toBe('2026-05-01T12:30:00Z');
    expect(at('2026-05-01T01:15:00+02:00')).toBe('2026-04-30T23:15:00Z');
    expect(at('2026-05-01T23:30:00-05:30')).toBe('2026-05-02T05:00:00Z');
  });

  it('keeps a fraction of a second as the upstream gave it, and gives none where it gave none', () => {
    expect(at('2026-05-01T14:30:00.987654+00:00')).toBe('2026-05-01T14:30:00.987654Z');
    expect(at('2026-05-01T14:30:59.999Z')).toBe('2026-05-01T14:30:59.999Z');
    // An offset moves the seconds, never the fraction.
    expect(at('2026-05-01T00:00:00.5+02:00')).toBe('2026-04-30T22:00:00.5Z');
    expect(at('2026-05-01T14:30:00.000+00:00')).toBe('2026-05-01T14:30:00.000Z');
    expect(at('2026-05-01T14:30:00+00:00')).toBe('2026-05-01T14:30:00Z');
  });

  it('writes every time field of a read as YYYY-MM-DDTHH:MM:SSZ, with its fraction', () => {
    const mapped = fromPartnerOrder({
      ...partnerOrder(),
      pickup_start_time: '2026-05-01T16:00:00+02:00',
      dropoff_start_time: '2026-05-01T17:00:00.5+02:00',
      delivery_start_time: '2026-05-01T15:30:00+02:00',
      delivery_end_time: '2026-05-01T13:00:00-05:00',
    });
    expect(mapped.pickup.windowStart).toBe('2026-05-01T14:00:00Z');
    expect(mapped.dropoff.windowStart).toBe('2026-05-01T15:00:00.5Z');
    expect(mapped.deliveryStartTime).toBe('2026-05-01T13:30:00Z');
    expect(mapped.deliveryEndTime).toBe('2026-05-01T18:00:00Z');
  });

  it('reads the full datetime delivery_date of a read as a calendar date', () => {
    expect(
      fromPlatformDelivery({ ...platformDelivery(), delivery_date: '2026-05-01T00:00:00+00:00' }).deliveryDate,
    ).toBe('2026-05-01');
    expect(
      fromPlatformDelivery({ ...platformDelivery(), delivery_date: '2026-05-01T23:30:00-02:00' }).deliveryDate,
    ).toBe('2026-05-02');
  });

  it('keeps the plain delivery_date of a webhook', () => {
    expect(fromWebhookEvent({ ...webhookEvent(), delivery_date: '2026-12-31' }).deliveryDate).toBe('2026-12-31');
    // The time of day a read gives is kept beside the date (a webhook's plain date has none).
    expect(
      fromPlatformDelivery({ ...platformDelivery(), delivery_date: '2026-05-01T23:30:00-02:00' }).scheduledAt,
    ).toBe('2026-05-02T01:30:00Z');
    expect(
      fromPlatformDelivery({ ...platformDelivery(), delivery_date: '2026-05-01T14:15:00+00:00' }).scheduledAt,
    ).toBe('2026-05-01T14:15:00Z');
    expect(fromWebhookEvent({ ...webhookEvent(), delivery_date: '2026-12-31' }).scheduledAt).toBeNull();
  });

  it('reads an unreadable or impossible time as no value, not a rolled-over one', () => {
    expect(at('tomorrow')).toBeNull();
    expect(at('2026-02-30T10:00:00+00:00')).toBeNull();
    expect(at('2026-05-01T24:00:00Z')).toBeNull();
    expect(utcDateTime('2026-05-01T14:61:00Z')).toBeNull();
    expect(calendarDate('2026-02-29')).toBeNull();
    expect(calendarDate('2028-02-29')).toBe('2028-02-29');
    expect(calendarDate('2026-13-01')).toBeNull();
  });
});

// ------------------------------------------------------------------ status and style

describe('status', () => {
  it.each([
    ['DROPOFF_COMPLETE', 'DROPOFF_COMPLETE'],
    ['dropoff complete', 'DROPOFF_COMPLETE'],
    ['Dropoff-Complete', 'DROPOFF_COMPLETE'],
    ['DropoffComplete', 'DROPOFF_COMPLETE'],
    ['dropoffcomplete', 'DROPOFF_COMPLETE'],
    ['  dropoff_complete  ', 'DROPOFF_COMPLETE'],
    ['Picked Up', 'PICKUP_COMPLETE'],
    ['picked-up', 'PICKUP_COMPLETE'],
    ['Canceled', 'CANCELED'],
    ['Cancelled', 'CANCELED'],
    ['CANCELED', 'CANCELED'],
    ['Pickup En Route', 'PICKUP_ENROUTE'],
    ['created', 'CREATED'],
    ['Failed', 'FAILED'],
    ['Return in progress', 'RETURN_IN_PROGRESS'],
  ] as const)('%j → %s', (raw, status) => {
    expect(deliveryStatus(raw)).toBe(status);
  });

  it('maps an unknown status to UNKNOWN and keeps the string in rawStatus', () => {
    for (const raw of ['Teleported', 'dropoff', '???', 'PICKUP_COMPLETE_X']) {
      const mapped = fromPlatformDelivery({ ...platformDelivery(), status: raw });
      expect(mapped.status).toBe('UNKNOWN');
      expect(mapped.rawStatus).toBe(raw);
    }
    expect(deliveryStatus(null)).toBe('UNKNOWN');
    expect(deliveryStatus('')).toBe('UNKNOWN');
    expect(deliveryStatus(42)).toBe('UNKNOWN');
  });

  it.each([
    ['delivery.created', 'CREATED'],
    ['delivery.assigned', 'ASSIGNED'],
    ['delivery.pickup_enroute', 'PICKUP_ENROUTE'],
    ['delivery.pickup_arrived', 'PICKUP_ARRIVED'],
    ['delivery.pickup_complete', 'PICKUP_COMPLETE'],
    ['delivery.dropoff_enroute', 'DROPOFF_ENROUTE'],
    ['delivery.dropoff_arrived', 'DROPOFF_ARRIVED'],
    ['delivery.dropoff_complete', 'DROPOFF_COMPLETE'],
    ['delivery.return_in_progress', 'RETURN_IN_PROGRESS'],
    ['delivery.returned', 'RETURNED'],
    ['delivery.canceled', 'CANCELED'],
    ['delivery.failed', 'FAILED'],
    ['location.assigned_driver', 'ASSIGNED'],
    ['location.pickup_enroute', 'PICKUP_ENROUTE'],
    ['location.pickup_arrived', 'PICKUP_ARRIVED'],
    ['location.pickup_complete', 'PICKUP_COMPLETE'],
    ['location.dropoff_enroute', 'DROPOFF_ENROUTE'],
    ['location.dropoff_arrived', 'DROPOFF_ARRIVED'],
    ['location.return_in_progress', 'RETURN_IN_PROGRESS'],
  ] as const)('statusOfEvent(%s) → %s', (eventName, status) => {
    expect(statusOfEvent(eventName)).toBe(status);
  });

  it('gives UNKNOWN for an event name it does not know', () => {
    expect(statusOfEvent('delivery.teleported')).toBe('UNKNOWN');
    expect(statusOfEvent('ping')).toBe('UNKNOWN');
  });
});

describe('style', () => {
  it.each([
    ['Standard', 'STANDARD'],
    ['Hybrid', 'HYBRID'],
    ['Special Handling', 'SPECIAL_HANDLING'],
    ['special_handling', 'SPECIAL_HANDLING'],
    ['Oversize', 'OVERSIZE'],
  ] as const)('%j → %s', (raw, style) => {
    const mapped = fromPlatformDelivery({ ...platformDelivery(), delivery_style: raw });
    expect(mapped.style).toBe(style);
    expect(mapped.rawStyle).toBe(raw);
  });

  it('maps a style enabled at onboarding that the facade does not know to OTHER, keeping rawStyle', () => {
    const mapped = fromPlatformDelivery({ ...platformDelivery(), delivery_style: 'White Glove' });
    expect(mapped.style).toBe('OTHER');
    expect(mapped.rawStyle).toBe('White Glove');
  });

  it('has no style when delivery_style is null or absent', () => {
    expect(deliveryStyle(null)).toBeNull();
    expect(deliveryStyle(undefined)).toBeNull();
  });
});

// ------------------------------------------------------------------ requests

function platformInput(): DeliveryInput {
  return {
    pickup: {
      name: 'Priya Patel',
      phone: '+12125550111',
      email: 'priya@shop.example',
      instructions: 'Front desk',
      address: {
        street: 'Broadway',
        number: '1250',
        city: 'New York',
        country: 'US',
        postalCode: '10001',
        latitude: 40.7484,
        longitude: -73.9878,
      },
      windowStart: '2026-05-01T14:00:00Z',
    },
    dropoff: {
      name: 'Diego Alvarez',
      phone: '+17185550122',
      email: 'diego@home.example',
      address: { street: 'Atlantic Avenue', city: 'Brooklyn', country: 'US', secondaryNumber: 'Apt 2B' },
      windowStart: '2026-05-01T15:00:00Z',
    },
    mode: 'SCHEDULED',
    deliveryDate: '2026-05-01',
    style: 'STANDARD',
    description: 'Two boxes of books',
    requirements: ['photo_proof_of_delivery'],
    items: [{ name: 'Atlas', quantity: 2, price: '24.99', externalId: 'sku-1' }],
    itemsCount: 2,
    weight: 6.5,
    declaredValue: '49.98',
    tip: '12.34',
    currency: 'usd',
    payload: { merchantId: 'm-42' },
  };
}

function partnerInput(): DeliveryInput {
  return {
    ...platformInput(),
    dropoff: { name: 'Diego Alvarez', windowStart: '2026-05-01T15:00:00Z' },
    currency: 'USD',
    partnerReference: 'PO-2026-0042',
    deliveryStartTime: '2026-05-01T13:30:00Z',
    deliveryEndTime: '2026-05-01T16:00:00Z',
  };
}

const GROUPS = [
  ['PLATFORM', platformInput],
  ['PARTNER', partnerInput],
] as const;

function problemsOf(input: DeliveryInput, group: 'PLATFORM' | 'PARTNER'): FieldProblem[] {
  return validateDeliveryInput(input, group);
}

function pathsOf(input: DeliveryInput, group: 'PLATFORM' | 'PARTNER'): string[] {
  return problemsOf(input, group).map((problem) => problem.path);
}

describe('validateDeliveryInput', () => {
  it.each(GROUPS)('accepts a complete %s input', (group, input) => {
    expect(problemsOf(input(), group)).toEqual([]);
  });

  it.each(GROUPS)('requires names, pickup address parts and pickup email on %s', (group, make) => {
    const input = make();
    input.pickup = { ...input.pickup, name: ' ', email: '', address: { street: '', city: '', country: '' } };
    input.dropoff = { ...input.dropoff, name: '' };
    expect(pathsOf(input, group).sort()).toEqual(
      [
        'input.dropoff.name',
        'input.pickup.address.city',
        'input.pickup.address.country',
        'input.pickup.address.street',
        'input.pickup.email',
        'input.pickup.name',
      ].sort(),
    );
    const noAddress = make();
    noAddress.pickup = { ...noAddress.pickup, address: null };
    expect(pathsOf(noAddress, group)).toEqual(['input.pickup.address']);
  });

  it('requires the dropoff address and its street, city and country on PLATFORM', () => {
    const input = platformInput();
    input.dropoff = { ...input.dropoff, address: null };
    expect(pathsOf(input, 'PLATFORM')).toEqual(['input.dropoff.address']);
    input.dropoff = { ...input.dropoff, address: { street: '', city: ' ', country: '' } };
    expect(pathsOf(input, 'PLATFORM').sort()).toEqual([
      'input.dropoff.address.city',
      'input.dropoff.address.country',
      'input.dropoff.address.street',
    ]);
  });

  it('leaves the dropoff address optional on PARTNER', () => {
    const input = partnerInput();
    expect(input.dropoff.address).toBeUndefined();
    expect(problemsOf(input, 'PARTNER')).toEqual([]);
    expect(problemsOf({ ...input, dropoff: { ...input.dropoff, address: null } }, 'PARTNER')).toEqual([]);
  });

  it.each(GROUPS)('bounds the pickup phone at 15 characters on %s', (group, make) => {
    const input = make();
    input.pickup = { ...input.pickup, phone: '+1212555011122' + '3' };
    expect(input.pickup.phone).toHaveLength(15);
    expect(problemsOf(input, group)).toEqual([]);
    input.pickup = { ...input.pickup, phone: '+12125550111234' + '5' };
    expect(pathsOf(input, group)).toEqual(['input.pickup.phone']);
  });

  it.each(GROUPS)('bounds the pickup instructions at 512 characters on %s', (group, make) => {
    const input = make();
    input.pickup = { ...input.pickup, instructions: 'x'.repeat(512) };
    expect(problemsOf(input, group)).toEqual([]);
    input.pickup = { ...input.pickup, instructions: 'x'.repeat(513) };
    expect(pathsOf(input, group)).toEqual(['input.pickup.instructions']);
  });

  it.each(GROUPS)('takes only a three-letter currency on %s', (group, make) => {
    for (const currency of ['US', 'USDX', 'U5D', '€€€'])
      expect(pathsOf({ ...make(), currency }, group)).toEqual(['input.currency']);
    for (const currency of ['USD', 'eur']) expect(problemsOf({ ...make(), currency }, group)).toEqual([]);
  });

  it('requires the currency on PARTNER only', () => {
    expect(pathsOf({ ...partnerInput(), currency: null }, 'PARTNER')).toEqual(['input.currency']);
    expect(pathsOf({ ...partnerInput(), currency: '' }, 'PARTNER')).toEqual(['input.currency']);
    expect(problemsOf({ ...platformInput(), currency: null }, 'PLATFORM')).toEqual([]);
  });

  it.each(GROUPS)('requires dropoff.windowStart unless mode is NOW on %s', (group, make) => {
    for (const mode of ['SCHEDULED', null, undefined] as const) {
      const input = make();
      input.mode = mode;
      input.dropoff = { ...input.dropoff, windowStart: null };
      expect(pathsOf(input, group)).toEqual(['input.dropoff.windowStart']);
    }
    const now = make();
    now.mode = 'NOW';
    now.dropoff = { ...now.dropoff, windowStart: null };
    expect(problemsOf(now, group)).toEqual([]);
  });

  it.each(GROUPS)(
    'requires deliveryDate when mode is absent or SCHEDULED and no dropoff window gives it, on %s',
    (group, make) => {
      for (const mode of ['SCHEDULED', null, undefined] as const) {
        const input = { ...make(), mode, deliveryDate: null };
        input.dropoff = { ...input.dropoff, windowStart: null };
        expect(pathsOf(input, group).sort()).toEqual(['input.deliveryDate', 'input.dropoff.windowStart']);
        // With a window start, the date is taken from it (see "deliveryDate, a UTC date").
        expect(problemsOf({ ...make(), mode, deliveryDate: null }, group)).toEqual([]);
      }
      expect(problemsOf({ ...make(), mode: 'NOW', deliveryDate: null }, group)).toEqual([]);
    },
  );

  it.each(GROUPS)(
    'requires a vehicle size for OVERSIZE on %s, and takes any (the upstream judges "SUV or larger")',
    (group, make) => {
      for (const size of [null, undefined, '', '   ']) {
        expect(problemsOf({ ...make(), style: 'OVERSIZE', minimumVehicleSize: size }, group)).toEqual([
          { path: 'input.minimumVehicleSize', message: 'is required for the OVERSIZE style' },
        ]);
      }
      for (const size of ['SUV', 'VAN', 'TRUCK', 'suv', 'CAR', 'BIKE', 'SEDAN', 'Cargo van (long wheelbase)']) {
        expect(problemsOf({ ...make(), style: 'OVERSIZE', minimumVehicleSize: size }, group)).toEqual([]);
      }
      expect(problemsOf({ ...make(), style: 'STANDARD', minimumVehicleSize: 'BIKE' }, group)).toEqual([]);
    },
  );

  it.each(GROUPS)('refuses the read-only OTHER style on %s', (group, make) => {
    expect(pathsOf({ ...make(), style: 'OTHER' }, group)).toEqual(['input.style']);
  });

  it.each(GROUPS)(
    'takes a rawStyle of any non-blank text up to 64 characters on %s, instead of style',
    (group, make) => {
      for (const rawStyle of ['White Glove', ' Cold Chain ', 'x'.repeat(64), `  ${'y'.repeat(64)}  `]) {
        expect(problemsOf({ ...make(), style: null, rawStyle }, group)).toEqual([]);
      }
      expect(problemsOf({ ...make(), style: null, rawStyle: '' }, group)).toEqual([
        { path: 'input.rawStyle', message: 'must not be blank' },
      ]);
      expect(problemsOf({ ...make(), style: null, rawStyle: ' \t ' }, group)).toEqual([
        { path: 'input.rawStyle', message: 'must not be blank' },
      ]);
      expect(problemsOf({ ...make(), style: null, rawStyle: 'x'.repeat(65) }, group)).toEqual([
        { path: 'input.rawStyle', message: 'must be at most 64 characters' },
      ]);
    },
  );

  it.each(GROUPS)('refuses style and rawStyle together on %s', (group, make) => {
    expect(pathsOf({ ...make(), style: 'STANDARD', rawStyle: 'White Glove' }, group)).toEqual(['input.rawStyle']);
    expect(pathsOf({ ...make(), style: 'HYBRID', rawStyle: 'Hybrid' }, group)).toEqual(['input.rawStyle']);
  });

  it.each(GROUPS)(
    'applies the rules of a documented style that rawStyle names, in any case or separators, on %s',
    (group, make) => {
      for (const rawStyle of ['oversize', 'OVERSIZE', ' Oversize ', 'over-size']) {
        expect(pathsOf({ ...make(), style: null, rawStyle, minimumVehicleSize: null }, group)).toEqual([
          'input.minimumVehicleSize',
        ]);
        expect(problemsOf({ ...make(), style: null, rawStyle, minimumVehicleSize: 'CAR' }, group)).toEqual([]);
      }
      // A style the facade does not know has no rules of its own here.
      expect(problemsOf({ ...make(), style: null, rawStyle: 'Oversize XL', minimumVehicleSize: null }, group)).toEqual(
        [],
      );
    },
  );

  it.each(GROUPS)('checks item prices like the tip on %s, each at its own path', (group, make) => {
    const items = [
      { name: 'ok', price: '24.99' },
      { name: 'negative', price: '-1.00' },
      { name: 'fraction of a cent', price: '0.001' },
      { name: 'huge', price: '1000000000000.01' },
      { name: 'none', price: null },
    ];
    expect(problemsOf({ ...make(), items }, group)).toEqual([
      { path: 'input.items.1.price', message: 'must not be negative' },
      { path: 'input.items.2.price', message: 'must have at most two decimal places (it is sent in cents)' },
      { path: 'input.items.3.price', message: 'must be at most 1000000000000.00' },
    ]);
    expect(
      problemsOf({ ...make(), items: [{ price: '0' }, { price: '1000000000000' }, { price: '0.5' }] }, group),
    ).toEqual([]);
  });

  it('refuses the partner-only fields on PLATFORM', () => {
    const input = {
      ...platformInput(),
      partnerReference: 'PO-1',
      deliveryStartTime: '2026-05-01T13:30:00Z',
      deliveryEndTime: '2026-05-01T16:00:00Z',
    };
    expect(pathsOf(input, 'PLATFORM').sort()).toEqual([
      'input.deliveryEndTime',
      'input.deliveryStartTime',
      'input.partnerReference',
    ]);
    expect(problemsOf(input, 'PARTNER')).toEqual([]);
  });

  it.each(GROUPS)('refuses amounts with more than two decimals on %s', (group, make) => {
    expect(pathsOf({ ...make(), tip: '1.234' }, group)).toEqual(['input.tip']);
    expect(pathsOf({ ...make(), declaredValue: '0.001' }, group)).toEqual(['input.declaredValue']);
    expect(problemsOf({ ...make(), tip: '1.20', declaredValue: '100' }, group)).toEqual([]);
  });

  it.each(GROUPS)('reports every problem at once on %s, each with its input path', (group, make) => {
    const input = make();
    input.pickup = { ...input.pickup, name: '', phone: '+1 212 555 0111 ext 9', instructions: 'y'.repeat(600) };
    input.dropoff = { ...input.dropoff, windowStart: null };
    Object.assign(input, {
      currency: 'DOLLARS',
      deliveryDate: null,
      style: 'OVERSIZE',
      minimumVehicleSize: ' ',
      tip: '0.001',
    });
    const problems = problemsOf(input, group);
    expect(problems.map((p) => p.path).sort()).toEqual(
      [
        'input.currency',
        'input.deliveryDate',
        'input.dropoff.windowStart',
        'input.minimumVehicleSize',
        'input.pickup.instructions',
        'input.pickup.name',
        'input.pickup.phone',
        'input.tip',
      ].sort(),
    );
    for (const problem of problems) expect(problem.message).toMatch(/\S/);
    // toWireRequest throws the same problems as one ValidationError.
    let thrown: unknown;
    try {
      toWireRequest(input, group, 'cents');
    } catch (error) {
      thrown = error;
    }
    expect(thrown).toBeInstanceOf(ValidationError);
    expect((thrown as ValidationError).code).toBe('VALIDATION_FAILED');
    expect((thrown as ValidationError).fields).toEqual(problems);
  });
});

describe('toWireRequest', () => {
  it('writes a PLATFORM body with the upstream spellings', () => {
    expect(toWireRequest(platformInput(), 'PLATFORM', 'cents')).toEqual({
      pickup_name: 'Priya Patel',
      dropoff_name: 'Diego Alvarez',
      email: 'priya@shop.example',
      pickup_address_street: 'Broadway',
      pickup_address_number: '1250',
      pickup_address_city: 'New York',
      pickup_address_country: 'US',
      pickup_address_postal_code: '10001',
      pickup_address_latitude: 40.7484,
      pickup_address_longitude: -73.9878,
      dropoff_address_street: 'Atlantic Avenue',
      dropoff_address_city: 'Brooklyn',
      dropoff_address_country: 'US',
      dropoff_address_secondary_number: 'Apt 2B',
      pickup_phone_number: '+12125550111',
      dropoff_phone_number: '+17185550122',
      pickup_instructions: 'Front desk',
      dropoff_email: 'diego@home.example',
      pickup_start_time: '2026-05-01T14:00:00Z',
      dropoff_start_time: '2026-05-01T15:00:00Z',
      delivery_date: '2026-05-01',
      package_delivery_mode: 'SCHEDULED',
      delivery_style: 'Standard',
      weight: 6.5,
      package_description: 'Two boxes of books',
      package_requirements: ['photo_proof_of_delivery'],
      items: [{ name: 'Atlas', quantity: 2, price: 2499, external_id: 'sku-1' }],
      items_count: 2,
      package_value: 4998,
      tip: 1234,
      currency: 'USD',
      platform_payload: { merchantId: 'm-42' },
    });
  });

  it('writes a PARTNER body with partner_payload and the partner-only fields, without a dropoff address', () => {
    const body = toWireRequest(partnerInput(), 'PARTNER', 'cents');
    expect(body.partner_payload).toEqual({ merchantId: 'm-42' });
    expect(body).not.toHaveProperty('platform_payload');
    expect(body.partner_reference).toBe('PO-2026-0042');
    expect(body.delivery_start_time).toBe('2026-05-01T13:30:00Z');
    expect(body.delivery_end_time).toBe('2026-05-01T16:00:00Z');
    expect(body.currency).toBe('USD');
    expect(Object.keys(body).filter((key) => key.startsWith('dropoff_address_'))).toEqual([]);
  });

  it('sends the payload as platform_payload on PLATFORM, never partner_payload', () => {
    const body = toWireRequest(platformInput(), 'PLATFORM', 'cents');
    expect(body.platform_payload).toEqual({ merchantId: 'm-42' });
    expect(body).not.toHaveProperty('partner_payload');
    expect(body).not.toHaveProperty('partner_reference');
  });

  it('converts tip, declared value and item prices to cents by default: "12.34" → 1234', () => {
    const items = [{ name: 'a', price: '12.34' }, { name: 'b', price: '0.29' }, { name: 'c' }];
    const body = toWireRequest({ ...platformInput(), tip: '12.34', declaredValue: '0.29', items }, 'PLATFORM', 'cents');
    expect(body.tip).toBe(1234);
    expect(body.package_value).toBe(29); // 0.29 * 100 in binary floats is 28.999999999999996
    expect(body.items).toEqual([{ name: 'a', price: 1234 }, { name: 'b', price: 29 }, { name: 'c' }]);
  });

  it('sends major units as they are when the unit is major: "12.34" → 12.34', () => {
    const body = toWireRequest(
      { ...platformInput(), tip: '12.34', declaredValue: '49.98', items: [{ name: 'a', price: '12.34' }] },
      'PLATFORM',
      'major',
    );
    expect(body.tip).toBe(12.34);
    expect(body.package_value).toBe(49.98);
    expect(body.items).toEqual([{ name: 'a', price: 12.34 }]);
  });

  it('converts item prices on the PARTNER group too', () => {
    expect(toWireRequest({ ...partnerInput(), items: [{ price: '24.99' }] }, 'PARTNER', 'cents').items).toEqual([
      { price: 2499 },
    ]);
  });

  it('refuses an item price with three decimals instead of rounding it', () => {
    expect(() => toWireRequest({ ...platformInput(), items: [{ price: '24.999' }] }, 'PLATFORM', 'cents')).toThrow(
      ValidationError,
    );
  });

  it('refuses a tip with three decimals instead of rounding it', () => {
    expect(() => toWireRequest({ ...platformInput(), tip: '12.345' }, 'PLATFORM', 'cents')).toThrow(ValidationError);
    expect(() => toWireRequest({ ...partnerInput(), tip: '12.345' }, 'PARTNER', 'major')).toThrow(ValidationError);
  });

  it.each([
    ['STANDARD', 'Standard'],
    ['HYBRID', 'Hybrid'],
    ['SPECIAL_HANDLING', 'Special Handling'],
  ] as const)('sends style %s as %j', (style, wire) => {
    expect(toWireRequest({ ...platformInput(), style }, 'PLATFORM', 'cents').delivery_style).toBe(wire);
  });

  it('sends OVERSIZE as "Oversize" with the vehicle size', () => {
    const body = toWireRequest(
      { ...platformInput(), style: 'OVERSIZE', minimumVehicleSize: 'VAN' },
      'PLATFORM',
      'cents',
    );
    expect(body.delivery_style).toBe('Oversize');
    expect(body.package_minimum_vehicle_size).toBe('VAN');
  });

  it('sends OVERSIZE with any vehicle size as it was given', () => {
    const body = toWireRequest(
      { ...platformInput(), style: 'OVERSIZE', minimumVehicleSize: 'Cargo bike' },
      'PLATFORM',
      'cents',
    );
    expect(body).toMatchObject({ delivery_style: 'Oversize', package_minimum_vehicle_size: 'Cargo bike' });
  });

  it.each(GROUPS)(
    'sends a rawStyle the facade does not know as delivery_style, trimmed and otherwise unchanged, on %s',
    (group, make) => {
      expect(toWireRequest({ ...make(), style: null, rawStyle: '  White Glove ' }, group, 'cents').delivery_style).toBe(
        'White Glove',
      );
      expect(toWireRequest({ ...make(), style: null, rawStyle: 'cold_chain/2' }, group, 'cents').delivery_style).toBe(
        'cold_chain/2',
      );
    },
  );

  it.each([
    ['oversize', 'Oversize'],
    ['SPECIAL_HANDLING', 'Special Handling'],
    ['special handling', 'Special Handling'],
    ['special-handling', 'Special Handling'],
    [' hybrid ', 'Hybrid'],
    ['STANDARD', 'Standard'],
  ])('sends rawStyle %j, a documented style, in its documented spelling %j', (rawStyle, wire) => {
    const body = toWireRequest(
      { ...platformInput(), style: null, rawStyle, minimumVehicleSize: 'SUV' },
      'PLATFORM',
      'cents',
    );
    expect(body.delivery_style).toBe(wire);
  });

  it('omits what the input leaves out, so the upstream applies its defaults', () => {
    const minimal: DeliveryInput = {
      pickup: { name: 'P', email: 'p@x.example', address: { street: 'S', city: 'C', country: 'US' } },
      dropoff: { name: 'D', address: { street: 'S2', city: 'C2', country: 'US' } },
      mode: 'NOW',
    };
    expect(toWireRequest(minimal, 'PLATFORM', 'cents')).toEqual({
      pickup_name: 'P',
      dropoff_name: 'D',
      email: 'p@x.example',
      pickup_address_street: 'S',
      pickup_address_city: 'C',
      pickup_address_country: 'US',
      dropoff_address_street: 'S2',
      dropoff_address_city: 'C2',
      dropoff_address_country: 'US',
      package_delivery_mode: 'NOW',
    });
  });
});

describe('deliveryDate, a UTC date', () => {
  // A Sydney merchant's window at 09:00 on 2 May (+10:00) is 23:00 UTC on 1 May, as the DateTime scalar hands it over.
  const sydney = (deliveryDate: string | null, mode: DeliveryInput['mode'] = 'SCHEDULED'): DeliveryInput => {
    const input = platformInput();
    return {
      ...input,
      mode,
      deliveryDate,
      pickup: { ...input.pickup, windowStart: '2030-05-01T22:00:00Z' },
      dropoff: { ...input.dropoff, windowStart: '2030-05-01T23:00:00Z' },
    };
  };

  it.each(GROUPS)(
    'refuses a deliveryDate that contradicts the UTC date of dropoff.windowStart on %s, naming both fields',
    (group, make) => {
      const input = {
        ...make(),
        deliveryDate: '2030-05-02',
        dropoff: { ...make().dropoff, windowStart: '2030-05-01T23:00:00Z' },
      };
      expect(problemsOf(input, group)).toEqual([
        {
          path: 'input.deliveryDate',
          message: 'is 2030-05-02, but dropoff.windowStart falls on 2030-05-01 in UTC; deliveryDate is a UTC date',
        },
        {
          path: 'input.dropoff.windowStart',
          message:
            'falls on 2030-05-01 in UTC, not on deliveryDate 2030-05-02; send deliveryDate 2030-05-01, or leave it out',
        },
      ]);
      let thrown: unknown;
      try {
        toWireRequest(input, group, 'cents');
      } catch (error) {
        thrown = error;
      }
      expect(thrown).toBeInstanceOf(ValidationError);
      expect((thrown as ValidationError).fields.map((field) => field.path)).toEqual([
        'input.deliveryDate',
        'input.dropoff.windowStart',
      ]);
    },
  );

  it('takes the UTC date, not the local one: the Sydney window of 2 May is on 1 May', () => {
    expect(pathsOf(sydney('2030-05-02'), 'PLATFORM')).toEqual(['input.deliveryDate', 'input.dropoff.windowStart']);
    expect(problemsOf(sydney('2030-05-01'), 'PLATFORM')).toEqual([]);
    expect(toWireRequest(sydney('2030-05-01'), 'PLATFORM', 'cents')).toMatchObject({
      delivery_date: '2030-05-01',
      dropoff_start_time: '2030-05-01T23:00:00Z',
    });
  });

  it('compares in UTC a window start given with an offset by a caller other than the DateTime scalar', () => {
    const input = sydney('2030-05-02');
    input.dropoff = { ...input.dropoff, windowStart: '2030-05-02T09:00:00+10:00' };
    expect(pathsOf(input, 'PLATFORM')).toEqual(['input.deliveryDate', 'input.dropoff.windowStart']);
  });

  it('refuses the contradiction with mode NOW too: both fields were given', () => {
    expect(pathsOf(sydney('2030-05-02', 'NOW'), 'PLATFORM')).toEqual([
      'input.deliveryDate',
      'input.dropoff.windowStart',
    ]);
  });

  it.each(GROUPS)(
    'sends the UTC date of dropoff.windowStart as delivery_date when it is needed and left out, on %s',
    (group, make) => {
      for (const mode of ['SCHEDULED', null, undefined] as const) {
        const input = {
          ...make(),
          mode,
          deliveryDate: null,
          dropoff: { ...make().dropoff, windowStart: '2030-05-01T23:00:00Z' },
        };
        expect(toWireRequest(input, group, 'cents').delivery_date).toBe('2030-05-01');
      }
    },
  );

  it('derives nothing with mode NOW, where no date is needed', () => {
    const body = toWireRequest(sydney(null, 'NOW'), 'PLATFORM', 'cents');
    expect(body).not.toHaveProperty('delivery_date');
    expect(body.dropoff_start_time).toBe('2030-05-01T23:00:00Z');
  });

  it('sends a deliveryDate given without a window as it is', () => {
    const input = { ...sydney('2030-05-02', 'NOW'), dropoff: { ...sydney(null).dropoff, windowStart: null } };
    expect(toWireRequest(input, 'PLATFORM', 'cents').delivery_date).toBe('2030-05-02');
  });
});

describe('amount units, each its own setting', () => {
  const withAmounts = (): DeliveryInput => ({
    ...platformInput(),
    tip: '3.50',
    declaredValue: '45.10',
    items: [{ name: 'Atlas', price: '12.34' }, { name: 'Pen' }],
  });

  it('sends tip and declared value in cents and item prices in major units (UPSTREAM_ITEM_PRICE_UNIT=major)', () => {
    const body = toWireRequest(withAmounts(), 'PLATFORM', { amountUnit: 'cents', itemPriceUnit: 'major' });
    expect(body.tip).toBe(350);
    expect(body.package_value).toBe(4510);
    expect(body.items).toEqual([{ name: 'Atlas', price: 12.34 }, { name: 'Pen' }]);
  });

  it('and the other way round: tip in major units, item prices in cents', () => {
    const body = toWireRequest({ ...withAmounts(), currency: 'USD' }, 'PARTNER', {
      amountUnit: 'major',
      itemPriceUnit: 'cents',
    });
    expect(body.tip).toBe(3.5);
    expect(body.package_value).toBe(45.1);
    expect(body.items).toEqual([{ name: 'Atlas', price: 1234 }, { name: 'Pen' }]);
  });

  it('one unit alone is both, as before', () => {
    expect(toWireRequest(withAmounts(), 'PLATFORM', 'cents')).toMatchObject({
      tip: 350,
      package_value: 4510,
      items: [{ price: 1234 }, {}],
    });
    expect(toWireRequest(withAmounts(), 'PLATFORM', { amountUnit: 'major', itemPriceUnit: 'major' })).toMatchObject({
      tip: 3.5,
      items: [{ price: 12.34 }, {}],
    });
  });
});

describe('quoteFromWire in UPSTREAM_QUOTE_AMOUNT_UNIT', () => {
  const answer = (price: Record<string, unknown>) =>
    ({ message: 'Quote created.', data: { price: { currency: 'USD', ...price }, distance: 4.2 } }) as never;

  it('reads major units as they are (the default)', () => {
    expect(quoteFromWire('PLATFORM', answer({ delivery_fee: 12.5, tip: 3.5 }), 'major')).toMatchObject({
      fee: { amount: '12.50', currency: 'USD' },
      tip: { amount: '3.50', currency: 'USD' },
    });
  });

  it('divides cents by 100', () => {
    expect(quoteFromWire('PLATFORM', answer({ delivery_fee: 1250, tip: 350 }), 'cents')).toMatchObject({
      fee: { amount: '12.50', currency: 'USD' },
      tip: { amount: '3.50', currency: 'USD' },
    });
    expect(quoteFromWire('PARTNER', answer({ delivery_fee: '1999', tip: 5 }), 'cents')).toMatchObject({
      fee: { amount: '19.99' },
      tip: { amount: '0.05' },
    });
  });

  it('still refuses a quote without a fee and keeps a missing tip null, in either unit', () => {
    for (const unit of ['major', 'cents'] as const) {
      expect(() => quoteFromWire('PLATFORM', answer({ tip: 350 }), unit)).toThrow(/without a delivery fee/);
      // A fee in no currency is no fee a client can show: never a currency of "".
      expect(() => quoteFromWire('PLATFORM', answer({ delivery_fee: 5, currency: null }), unit)).toThrow(
        /without a currency/,
      );
      expect(quoteFromWire('PLATFORM', answer({ delivery_fee: 0 }), unit)).toMatchObject({
        fee: { amount: '0.00' },
        tip: null,
      });
    }
  });
});

describe('validationErrorFromUpstream', () => {
  it('maps the upstream field names back to input paths, one problem per message', () => {
    const upstream = new UpstreamValidationError('The pickup phone number is too long.', {
      pickup_phone_number: ['must be at most 15 characters'],
      dropoff_address_city: ['is required', 'must be text'],
    });
    const error = validationErrorFromUpstream(upstream, 'sk_unrelated');
    expect(error).toBeInstanceOf(ValidationError);
    expect(error.code).toBe('VALIDATION_FAILED');
    expect(error.fields).toEqual([
      { path: 'input.pickup.phone', message: 'must be at most 15 characters' },
      { path: 'input.dropoff.address.city', message: 'is required' },
      { path: 'input.dropoff.address.city', message: 'must be text' },
    ]);
  });

  it('maps the other request fields to their input names', () => {
    const upstream = new UpstreamValidationError('invalid', {
      email: ['required'],
      pickup_address_postal_code: ['bad'],
      dropoff_address_secondary_number: ['bad'],
      package_value: ['bad'],
      partner_payload: ['bad'],
      dropoff_start_time: ['bad'],
    });
    expect(validationErrorFromUpstream(upstream, 'sk_unrelated').fields.map((f) => f.path)).toEqual([
      'input.pickup.email',
      'input.pickup.address.postalCode',
      'input.dropoff.address.secondaryNumber',
      'input.declaredValue',
      'input.payload',
      'input.dropoff.windowStart',
    ]);
  });

  it('names the field from the message when the upstream sends no errors object (partner group)', () => {
    const error = validationErrorFromUpstream(
      new UpstreamValidationError('pickup_phone_number is too long', {}),
      'sk_unrelated',
    );
    expect(error.fields).toEqual([{ path: 'input.pickup.phone', message: 'pickup_phone_number is too long' }]);
  });

  it('names each field from its message when errors is a bare list of messages', () => {
    const error = validationErrorFromUpstream(
      new UpstreamValidationError('invalid', { '': ['The email field is required.', 'Something is off.'] }),
      'sk_unrelated',
    );
    expect(error.fields).toEqual([
      { path: 'input.pickup.email', message: 'The email field is required.' },
      { path: 'input', message: 'Something is off.' },
    ]);
  });

  it('places a delivery_style problem on rawStyle when the client sent rawStyle, else on style', () => {
    const upstream = new UpstreamValidationError('The selected delivery_style is invalid.', {
      delivery_style: ['The selected delivery_style is invalid.'],
    });
    expect(
      validationErrorFromUpstream(upstream, 'k', { ...platformInput(), style: null, rawStyle: 'White Glove' })
        .fields[0]!.path,
    ).toBe('input.rawStyle');
    expect(validationErrorFromUpstream(upstream, 'k', platformInput()).fields[0]!.path).toBe('input.style');
    expect(validationErrorFromUpstream(upstream, 'k').fields[0]!.path).toBe('input.style');
    const partner = new UpstreamValidationError('The selected delivery_style is invalid.', {});
    expect(
      validationErrorFromUpstream(partner, 'k', { ...partnerInput(), style: null, rawStyle: 'White Glove' }).fields[0]!
        .path,
    ).toBe('input.rawStyle');
  });

  it('scrubs the merchant key from messages and paths', () => {
    const key = 'sk_live_echoed_key';
    const upstream = new UpstreamValidationError(`Key ${key} may not book this.`, { [`x_${key}`]: [`bad ${key}`] });
    const error = validationErrorFromUpstream(upstream, key);
    expect(JSON.stringify({ message: error.message, fields: error.fields })).not.toContain(key);
    expect(error.message).toBe('Key [redacted] may not book this.');
  });
});

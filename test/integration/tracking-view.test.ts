// The delivery every message carries (issue 38): the delivery as known after its
// event, merged over the subscription's first read and every earlier read and
// event, whichever came first. The sandbox books and serves reads over real
// HTTP; every webhook is signed and posted by the test itself, with every field
// the document lists for the body (null where it has no value, as the document
// allows), and awaited (200) before the next. Real graphql-ws clients, on the
// embedded SQLite store and on Redis.
import type { KeyObject } from 'node:crypto';
import { SignJWT } from 'jose';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { loadSigningKeys } from '@delivery-graph/sandbox/webhook-sender';
import { deliveryInput, partnerOrderBody, type Stack } from '../helpers/stack.js';
import { trackingStores } from '../helpers/tracking.js';
import { collect, wsClient } from '../helpers/ws-client.js';

const CREATE = `mutation($input: DeliveryInput!) { createDelivery(input: $input) { ... on MutationCreateDeliverySuccess { data { uid } } } }`;
/** What a subscriber keeps on screen: what only reads carry, what events carry, and what both do. */
const VIEW = `status trackingUrl style rawStyle partnerReference payload estimatedDropoffAt scheduledAt deliveryDate
  deliveryEndTime price { amount currency } tip distance { value unit } expectedCancellationFee { amount currency }
  pickup { name phone email address { street number city postalCode country latitude longitude } windowStart }
  dropoff { name phone address { street number city country latitude longitude } windowStart }
  package { description weight declaredValue requirements } courier { name pickupPhone }`;
const UPDATED = `subscription($uid: ID!) { deliveryUpdated(uid: $uid) { name delivery { ${VIEW} } reported { price { amount currency } estimatedDropoffAt } } }`;
const READ = `query($uid: ID!, $group: ApiGroup) { delivery(uid: $uid, group: $group) { ${VIEW} } }`;
const EVENTS = `query($uid: ID!) { delivery(uid: $uid) { events { edges { node { name delivery { price { amount currency } } reported { price { amount currency } } } } } } }`;
const BY_REFERENCE = `query($reference: String!) { deliveryByReference(partnerReference: $reference) { uid partnerReference payload } }`;

let privateKey: KeyObject;
let privateKeyPem: string;

const stores = trackingStores('tracking-view.test.ts');
beforeAll(async () => {
  ({ privateKey } = await loadSigningKeys());
  privateKeyPem = privateKey.export({ type: 'pkcs8', format: 'pem' }).toString();
  await stores.setup();
});
afterAll(() => stores.teardown());

/**
 * Every field the document lists for a webhook body: the courier's (it is an
 * assignment), and null for each one with no value ("sent as null or omitted;
 * both mean the same"); the address objects omitted ("omitted entirely when
 * empty"). `fields` replace any of them.
 */
function everyField(uid: string, name: string, fields: Record<string, unknown> = {}): Record<string, unknown> {
  return {
    uid,
    event_name: name,
    status: name.slice(name.indexOf('.') + 1),
    platform_payload: null,
    price: null,
    distance: null,
    tip: null,
    pickup_name: null,
    pickup_phone_number: null,
    pickup_instructions: null,
    email: null,
    dropoff_name: null,
    dropoff_phone_number: null,
    dropoff_instructions: null,
    driver_id: 7,
    driver_name: 'Rosa Diaz',
    driver_location: { lat: 40.71, lng: -73.99 },
    driver_pickup_phone_number: '+15550101',
    driver_dropoff_phone_number: '+15550102',
    driver_vehicle_make: 'Cargo',
    driver_vehicle_model: 'Bike',
    driver_vehicle_year: 2024,
    dropoff_time_estimated: null,
    delivery_date: null,
    pickup_start_time: null,
    dropoff_start_time: null,
    delivery_start_time: null,
    delivery_end_time: null,
    package_description: null,
    package_minimum_vehicle_size: null,
    package_delivery_mode: null,
    package_requirements: null,
    package_value: null,
    items_count: null,
    items: null,
    weight: null,
    dropoff_verification_image_url: null,
    dropoff_signature_image_url: null,
    cancellation_reason: null,
    ...fields,
  };
}

describe.each(stores.cases)('the delivery each message carries, on %s', (kind, enabled) => {
  let stack: Stack;
  beforeAll(async () => {
    if (!enabled) return;
    stack = await stores.start(kind, { sandbox: { privateKeyPem } });
    // Every event here is posted by the test: it decides what each one carries.
    stack.sandbox.setWebhookUrl(undefined);
  });
  afterAll(async () => {
    await stack?.stop();
  });
  const test = it.skipIf(!enabled);

  /** Signs one event as the upstream would and posts it; resolves once the facade answered 200. */
  async function post(payload: Record<string, unknown>): Promise<void> {
    const token = await new SignJWT({ payload })
      .setProtectedHeader({ alg: 'RS256', typ: 'JWT' })
      .setIssuer(stack.sandbox.issuer)
      .setIssuedAt()
      .setExpirationTime('5m')
      .sign(privateKey);
    const response = await fetch(stack.app.webhookUrl, {
      method: 'POST',
      headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' },
      body: JSON.stringify(payload),
    });
    expect(response.status, `${String(payload.event_name)} for ${String(payload.uid)}`).toBe(200);
  }

  async function book(overrides: Record<string, unknown> = {}): Promise<string> {
    const result = await stack.gql(CREATE, { input: deliveryInput(overrides) });
    const uid = result.data?.createDelivery?.data?.uid as string | undefined;
    if (!uid) throw new Error(`booking refused: ${JSON.stringify(result)}`);
    return uid;
  }

  /** Follows deliveryUpdated from now on: its messages' deliveries, in order. */
  function follow(uid: string) {
    const client = wsClient(stack.app.url, stack.key);
    const updates = collect(client, UPDATED, { uid });
    return {
      updates,
      /** The delivery of message `n` (1-based), once it arrived. */
      async message(n: number) {
        const items = await updates.waitFor(n);
        expect(updates.errors).toEqual([]);
        return items[n - 1].deliveryUpdated;
      },
      close: () => client.dispose(),
    };
  }

  async function read(uid: string, group?: 'PLATFORM' | 'PARTNER') {
    const result = await stack.gql(READ, { uid, group });
    expect(result.errors).toBeUndefined();
    return result.data.delivery;
  }

  test('a subscriber from the booking keeps what the first read showed through an event that lacks it', async () => {
    const uid = await book({ style: 'SPECIAL_HANDLING', weight: 2.5 });
    const followed = follow(uid);
    try {
      const snapshot = await followed.message(1);
      expect(snapshot.name).toBe('snapshot');
      // What only a read carries, and what this event will not: all there at first.
      expect(snapshot.delivery).toMatchObject({
        style: 'SPECIAL_HANDLING',
        trackingUrl: expect.stringContaining(uid),
        expectedCancellationFee: { amount: expect.any(String), currency: 'USD' },
        estimatedDropoffAt: expect.stringMatching(/Z$/),
        pickup: { address: { street: 'Main St', city: 'Springfield' } },
        dropoff: { address: { street: 'Elm St' } },
        payload: { orderId: 'A-1', nested: { ok: true } },
      });
      await post(everyField(uid, 'delivery.assigned'));
      const assigned = await followed.message(2);
      expect(assigned.name).toBe('delivery.assigned');
      // The event's own: the courier and the milestone.
      expect(assigned.delivery.status).toBe('ASSIGNED');
      expect(assigned.delivery.courier).toEqual({ name: 'Rosa Diaz', pickupPhone: '+15550101' });
      // Everything else as the read showed it: nothing the event had no value for is lost.
      const { status: _s, courier: _c, ...before } = snapshot.delivery;
      const { status: _t, courier: _d, ...after } = assigned.delivery;
      expect(after).toEqual(before);
      // And as a read of the upstream says it.
      const { status: _r, courier: _e, ...upstream } = await read(uid);
      expect(after).toEqual(upstream);
      // A second event lacking them too: still there.
      await post(everyField(uid, 'delivery.pickup_enroute'));
      const { status: _u, courier: _f, ...later } = (await followed.message(3)).delivery;
      expect(later).toEqual(before);
    } finally {
      await followed.close();
    }
  });

  test("a partner order's messages keep its partnerReference and payload after every event", async () => {
    const reference = `PO-view-${kind}-${Date.now()}`;
    const order = stack.sandbox.seedPartnerOrder(
      stack.key,
      partnerOrderBody(reference, { partner_payload: { po: 38 }, package_delivery_mode: 'NOW' }),
    );
    // Read by its reference with the merchant's key: this proves the order is the merchant's.
    const byReference = await stack.gql(BY_REFERENCE, { reference });
    expect(byReference.data.deliveryByReference).toEqual({
      uid: order.uid,
      partnerReference: reference,
      payload: { po: 38 },
    });
    const followed = follow(order.uid);
    try {
      expect((await followed.message(1)).delivery).toMatchObject({ partnerReference: reference, payload: { po: 38 } });
      // The document's body has neither partner_reference nor partner_payload (platform_payload, null here).
      await post(everyField(order.uid, 'delivery.assigned'));
      await post(everyField(order.uid, 'delivery.pickup_enroute'));
      for (const n of [2, 3])
        expect((await followed.message(n)).delivery, `message ${n}`).toMatchObject({
          partnerReference: reference,
          payload: { po: 38 },
          trackingUrl: expect.stringContaining(order.uid),
        });
      expect(await read(order.uid, 'PARTNER')).toMatchObject({ partnerReference: reference, payload: { po: 38 } });
    } finally {
      await followed.close();
    }
  });

  test('a price the event has no value for stays as read; a currency the event leaves out is the one known', async () => {
    const uid = await book();
    // Priced once a courier takes it: the read the subscription starts with shows the price.
    await stack.sandbox.advance(uid);
    const followed = follow(uid);
    try {
      const snapshot = await followed.message(1);
      const price = snapshot.delivery.price;
      expect(price).toEqual({ amount: expect.stringMatching(/^\d+\.\d\d$/), currency: 'USD' });
      // "value is ... null until pricing settles": no value, so the price known stays.
      await post(everyField(uid, 'delivery.pickup_enroute', { price: { value: null, currency: 'USD' } }));
      expect((await followed.message(2)).delivery.price).toEqual(price);
      // A value without a currency: the currency known stays with the new value.
      await post(everyField(uid, 'delivery.pickup_arrived', { price: { value: 21.5 } }));
      const third = await followed.message(3);
      expect(third.delivery.price).toEqual({ amount: '21.50', currency: 'USD' });
      // The event alone has no currency for it: no price, never a currency of "".
      expect(third.reported.price).toBeNull();
    } finally {
      await followed.close();
    }
  });

  test('a price whose currency nobody gave is null, never a currency of ""', async () => {
    const uid = await book();
    // Nobody follows it: no read is merged, the events alone describe it.
    await post(everyField(uid, 'delivery.assigned', { price: { value: 9.99 } }));
    const result = await stack.gql(EVENTS, { uid });
    expect(result.errors).toBeUndefined();
    expect(result.data.delivery.events.edges.map((edge: any) => edge.node)).toEqual([
      { name: 'delivery.assigned', delivery: { price: null }, reported: { price: null } },
    ]);
  });

  test('datetimes keep their fractional seconds, in UTC with a Z; one without a fraction stays without', async () => {
    const uid = await book();
    const followed = follow(uid);
    try {
      await followed.message(1);
      await post(
        everyField(uid, 'delivery.assigned', {
          dropoff_time_estimated: '2030-05-01T16:45:30.125+00:00',
          delivery_end_time: '2030-05-01T19:00:00.5+02:00',
          pickup_start_time: '2030-05-01T14:00:00+00:00',
        }),
      );
      const assigned = await followed.message(2);
      expect(assigned.reported.estimatedDropoffAt).toBe('2030-05-01T16:45:30.125Z');
      expect(assigned.delivery).toMatchObject({
        estimatedDropoffAt: '2030-05-01T16:45:30.125Z',
        deliveryEndTime: '2030-05-01T17:00:00.5Z',
        pickup: { windowStart: '2030-05-01T14:00:00Z' },
      });
    } finally {
      await followed.close();
    }
  });
});

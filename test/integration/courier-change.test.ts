// A courier reassigned mid-delivery (issue 21, item 4): the sandbox gives the
// delivery another driver, whose delivery.assigned arrives while the delivery is
// already further on. Real graphql-ws subscribers see the new courier (name, id,
// pin) without the status going back; a subscriber that starts afterwards starts
// with the new courier; and the old courier's events arriving late change nothing.
import { exportPKCS8, generateKeyPair, SignJWT } from 'jose';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { deliveryInput, startStack, type Stack } from '../helpers/stack.js';
import { listenersAttached } from '../helpers/wait.js';
import { collect, wsClient } from '../helpers/ws-client.js';

const CREATE = `mutation($input: DeliveryInput!) { createDelivery(input: $input) { ... on MutationCreateDeliverySuccess { data { uid } } } }`;
const UPDATED = `subscription($uid: ID!) { deliveryUpdated(uid: $uid) { name status stale courierOnly delivery { status courier { id name location { lat lng } } } } }`;
const LOCATION = `subscription($uid: ID!) { courierLocation(uid: $uid) { milestone location { lat lng } courier { id name } } }`;

let stack: Stack;
let privateKey: CryptoKey;

beforeAll(async () => {
  // The test signs the old courier's late events itself, with the sandbox's own key.
  const pair = await generateKeyPair('RS256', { extractable: true });
  privateKey = pair.privateKey as CryptoKey;
  stack = await startStack({ sandbox: { privateKeyPem: await exportPKCS8(pair.privateKey) } });
});
afterAll(async () => {
  await stack?.stop();
});

/** Signs and posts one event the way the upstream would; returns the receiver's answer. */
async function post(event: Record<string, unknown>): Promise<{ status: string; stale: boolean }> {
  const token = await new SignJWT({ payload: event })
    .setProtectedHeader({ alg: 'RS256' })
    .setIssuer(stack.sandbox.issuer)
    .setExpirationTime('5m')
    .sign(privateKey);
  const response = await fetch(`${stack.app.url}/webhooks`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', authorization: `Bearer ${token}` },
    body: JSON.stringify(event),
  });
  expect(response.status).toBe(200);
  return (await response.json()) as { status: string; stale: boolean };
}

/** The newest stored event of the delivery with this name, as the upstream sent it. */
async function storedPayload(uid: string, name: string): Promise<Record<string, unknown>> {
  const events = await stack.app.services.store.eventsAfter(0, 500, { uids: [uid] });
  return events.filter((event) => event.name === name).at(-1)!.payload as unknown as Record<string, unknown>;
}

it('pushes a reassigned courier to subscribers without moving the status back, and ignores the old courier afterwards', async () => {
  const created = await stack.gql(CREATE, { input: deliveryInput() });
  const uid: string = created.data.createDelivery.data.uid;
  await stack.sandbox.advance(uid); // assigned
  await stack.sandbox.advance(uid); // pickup_enroute
  await stack.sandbox.idle();
  const oldEnroute = await storedPayload(uid, 'delivery.pickup_enroute');
  const oldPosition = await storedPayload(uid, 'location.pickup_enroute');

  const client = wsClient(stack.app.url, stack.key);
  const attached = listenersAttached(stack.app.services.bus, 2);
  const updated = collect(client, UPDATED, { uid });
  const located = collect(client, LOCATION, { uid });
  await attached;
  const [[before]] = [await updated.waitFor(1)];
  await located.waitFor(1);
  const oldCourier = before!.deliveryUpdated.delivery.courier;
  expect(before!.deliveryUpdated.status).toBe('PICKUP_ENROUTE');
  // Webhooks carry driver_id, a number; the schema gives it as a string.
  expect(oldCourier.id).toBe(String(oldEnroute.driver_id));
  expect(oldCourier.name).toBe(oldEnroute.driver_name);
  expect(located.items[0].courierLocation.courier).toEqual({ id: oldCourier.id, name: oldCourier.name });

  await stack.sandbox.reassignCourier(uid);
  await stack.sandbox.idle();
  const reassigned = await storedPayload(uid, 'delivery.assigned');
  const newCourier = { id: String(reassigned.driver_id), name: reassigned.driver_name as string };
  expect(newCourier.id).not.toBe(oldCourier.id);
  expect(newCourier.name).not.toBe(oldCourier.name);
  const newPin = reassigned.driver_location as { lat: number; lng: number };

  // deliveryUpdated: the new courier, with the status where the delivery is.
  const [, change] = await updated.waitFor(2);
  expect(change!.deliveryUpdated).toMatchObject({
    name: 'delivery.assigned',
    status: 'PICKUP_ENROUTE',
    stale: false,
    courierOnly: true,
    delivery: { status: 'PICKUP_ENROUTE', courier: { ...newCourier, location: newPin } },
  });
  // courierLocation: the new courier's pin, although its milestone (assigned) is behind the last pin's.
  const [, pin] = await located.waitFor(2);
  expect(pin!.courierLocation).toEqual({ milestone: 'assigned', location: newPin, courier: newCourier });

  // The old courier's events, arriving late: stored as stale, pushed to nobody.
  expect(
    await post({ ...oldPosition, driver_location: { lat: newPin.lat + 0.01, lng: newPin.lng + 0.01 } }),
  ).toMatchObject({ status: 'stored', stale: true });
  expect(await post({ ...oldEnroute, status: 'Pickup Enroute (late)' })).toMatchObject({
    status: 'stored',
    stale: true,
  });

  // A subscriber that starts now starts with the new courier, at the delivery's status.
  const late = wsClient(stack.app.url, stack.key);
  const lateUpdated = collect(late, UPDATED, { uid });
  const lateLocated = collect(late, LOCATION, { uid });
  const [[first]] = [await lateUpdated.waitFor(1)];
  expect(first!.deliveryUpdated).toMatchObject({
    status: 'PICKUP_ENROUTE',
    courierOnly: true,
    delivery: { status: 'PICKUP_ENROUTE', courier: newCourier },
  });
  const [firstPin] = await lateLocated.waitFor(1);
  expect(firstPin!.courierLocation).toEqual({ milestone: 'assigned', location: newPin, courier: newCourier });

  // The delivery goes on with the new courier; nothing of the old one came in between.
  await stack.sandbox.advance(uid); // pickup_arrived
  await updated.waitForItem((item) => item.deliveryUpdated.status === 'PICKUP_ARRIVED');
  await located.waitForItem((item) => item.courierLocation.milestone === 'pickup_arrived');
  expect(
    updated.items.map((item) => [item.deliveryUpdated.status, item.deliveryUpdated.delivery.courier.name]),
  ).toEqual([
    ['PICKUP_ENROUTE', oldCourier.name],
    ['PICKUP_ENROUTE', newCourier.name],
    ['PICKUP_ARRIVED', newCourier.name],
  ]);
  expect(located.items.slice(2).every((item) => item.courierLocation.courier.id === newCourier.id)).toBe(true);

  // Reads show the new driver too (a read keeps driver_id reserved: null).
  const read = await stack.gql(`query($uid: ID!) { delivery(uid: $uid) { status courier { id name } } }`, { uid });
  expect(read.data.delivery).toEqual({ status: 'PICKUP_ARRIVED', courier: { id: null, name: newCourier.name } });

  for (const sub of [updated, located, lateUpdated, lateLocated]) sub.dispose();
  await Promise.all([client.dispose(), late.dispose()]);
});

it('refuses to reassign a delivery that has no courier yet, and an unknown one', async () => {
  const created = await stack.gql(CREATE, { input: deliveryInput() });
  const uid: string = created.data.createDelivery.data.uid;
  const early = await fetch(`${stack.sandbox.origin}/sandbox/deliveries/${uid}/reassign`, { method: 'POST' });
  expect(early.status).toBe(409);
  expect(await early.json()).toMatchObject({ error: 'not_assigned' });
  const unknown = await fetch(
    `${stack.sandbox.origin}/sandbox/deliveries/00000000-0000-4000-8000-000000000000/reassign`,
    { method: 'POST' },
  );
  expect(unknown.status).toBe(404);
  await stack.sandbox.advance(uid);
  const done = await fetch(`${stack.sandbox.origin}/sandbox/deliveries/${uid}/reassign`, { method: 'POST' });
  expect(done.status).toBe(200);
  const body = (await done.json()) as { uid: string; driver_id: number; driver_name: string };
  expect(body).toMatchObject({ uid, driver_id: expect.any(Number), driver_name: expect.any(String) });
});

it('reassignRate 1 gives every delivery another courier once, on the way to the pickup, in events and reads', async () => {
  stack.sandbox.setKnobs({ reassignRate: 1 });
  try {
    const created = await stack.gql(CREATE, { input: deliveryInput() });
    const uid: string = created.data.createDelivery.data.uid;
    await stack.sandbox.advance(uid); // assigned
    await stack.sandbox.advance(uid); // pickup_enroute, then the new courier
    await stack.sandbox.advance(uid); // pickup_arrived: no second change
    await stack.sandbox.idle();
    const events = await stack.app.services.store.eventsAfter(0, 500, { uids: [uid] });
    const named = events
      .filter((event) => event.name.startsWith('delivery.'))
      .map((event) => [event.name, event.payload.driver_id, event.courierOnly]);
    const [first, second] = [named[1]![1], named[3]![1]];
    expect(second).not.toBe(first);
    expect(named).toEqual([
      ['delivery.created', null, false],
      ['delivery.assigned', first, false],
      ['delivery.pickup_enroute', first, false],
      ['delivery.assigned', second, true],
      ['delivery.pickup_arrived', second, false],
    ]);
    const read = await stack.gql(`query($uid: ID!) { delivery(uid: $uid) { status courier { name } } }`, { uid });
    expect(read.data.delivery).toEqual({
      status: 'PICKUP_ARRIVED',
      courier: { name: events.at(-1)!.payload.driver_name },
    });
  } finally {
    stack.sandbox.setKnobs({ reassignRate: 0 });
  }
});

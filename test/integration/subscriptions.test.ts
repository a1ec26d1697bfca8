// Subscriptions end to end: the sandbox moves a delivery and signs webhooks, the
// facade verifies and stores them, and real graphql-ws clients watch.
import { exportPKCS8, generateKeyPair, SignJWT } from 'jose';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { request as httpRequest } from 'node:http';
import WebSocket from 'ws';
import { callerCursors } from '../../src/domain/cursor.js';
import type { FaultProxy } from '../helpers/fault-proxy.js';
import { deliveryInput, startStack, type Stack } from '../helpers/stack.js';
import { listenersAttached, waitUntil } from '../helpers/wait.js';
import { collect, wsClient } from '../helpers/ws-client.js';

const CREATE = `mutation($input: DeliveryInput!) { createDelivery(input: $input) { ... on MutationCreateDeliverySuccess { data { uid } } } }`;
const UPDATED = `subscription($uid: ID!) { deliveryUpdated(uid: $uid) { cursor uid name status statusText stale courierLocation { lat lng } delivery { status courier { name } } } }`;
const LOCATION = `subscription($uid: ID!) { courierLocation(uid: $uid) { uid milestone location { lat lng } courier { name } receivedAt } }`;
const EVENTS = `subscription($uids: [ID!], $after: String) { deliveryEvents(uids: $uids, after: $after) { cursor uid name stale } }`;

const MILESTONES = [
  'ASSIGNED',
  'PICKUP_ENROUTE',
  'PICKUP_ARRIVED',
  'PICKUP_COMPLETE',
  'DROPOFF_ENROUTE',
  'DROPOFF_ARRIVED',
  'DROPOFF_COMPLETE',
];

let stack: Stack;
let privateKey: CryptoKey;

beforeAll(async () => {
  const pair = await generateKeyPair('RS256', { extractable: true });
  privateKey = pair.privateKey as CryptoKey;
  stack = await startStack({
    sandbox: { privateKeyPem: await exportPKCS8(pair.privateKey), knobs: { retryBaseMs: 20 } },
  });
});
afterAll(async () => {
  await stack?.stop();
});

async function book(key = stack.key): Promise<string> {
  const result = await stack.gql(CREATE, { input: deliveryInput() }, key);
  return result.data.createDelivery.data.uid;
}

/** Signs and posts one event the way the upstream would. */
async function post(event: Record<string, unknown>): Promise<Response> {
  const token = await new SignJWT({ payload: event })
    .setProtectedHeader({ alg: 'RS256' })
    .setIssuer(stack.sandbox.issuer)
    .setExpirationTime('5m')
    .sign(privateKey);
  return fetch(`${stack.app.url}/webhooks`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', authorization: `Bearer ${token}` },
    body: JSON.stringify(event),
  });
}

/**
 * A key's cursors are opaque: to check log order, or to start from a position the
 * receiver answered the upstream with, the test turns one into the other.
 */
const cursorsOf = async (target: Stack = stack, key = target.key) =>
  callerCursors(target.app.services.store, await target.app.services.merchants.of(key));
async function positionsOf(cursors: string[], target: Stack = stack): Promise<number[]> {
  const own = await cursorsOf(target);
  return cursors.map((cursor) => {
    const seq = own.seqOf(cursor);
    expect(seq, cursor).toBeDefined();
    return seq!;
  });
}

async function advanceAll(uid: string, steps = MILESTONES.length): Promise<void> {
  for (let i = 0; i < steps; i += 1) await stack.sandbox.advance(uid);
}

describe('deliveryUpdated', () => {
  it('sees the whole lifecycle in order, from the current state to DROPOFF_COMPLETE, then completes', async () => {
    const uid = await book();
    const client = wsClient(stack.app.url, stack.key);
    const sub = collect(client, UPDATED, { uid });
    const [first] = await sub.waitFor(1);
    expect(first.deliveryUpdated.status).toBe('CREATED');
    expect(['delivery.created', 'snapshot']).toContain(first.deliveryUpdated.name);

    await advanceAll(uid);
    await sub.waitFor(1 + MILESTONES.length);
    await sub.done;
    expect(sub.completed).toBe(true);
    const updates = sub.items.map((item) => item.deliveryUpdated);
    expect(updates.map((u) => u.status)).toEqual(['CREATED', ...MILESTONES]);
    expect(updates.slice(1).map((u) => u.name)).toEqual(MILESTONES.map((m) => `delivery.${m.toLowerCase()}`));
    expect(updates.find((u) => u.status === 'PICKUP_COMPLETE').statusText).toBe('Picked Up');
    expect(updates.at(-1).delivery.courier.name).toBeTruthy();
    expect(updates.every((u) => u.stale === false)).toBe(true);
    const cursors = await positionsOf(updates.slice(1).map((u) => u.cursor));
    expect([...cursors].sort((a, b) => a - b)).toEqual(cursors);
    await client.dispose();
  });

  it('takes event names in any case, as the stores do', async () => {
    const uid = await book();
    const client = wsClient(stack.app.url, stack.key);
    const sub = collect(client, UPDATED, { uid });
    await sub.waitFor(1);
    await post({ uid, event_name: 'Delivery.Assigned', status: 'assigned' });
    await post({ uid, event_name: 'DELIVERY.ASSIGNED', status: 'assigned again' });
    const [, assigned] = await sub.waitFor(2);
    expect(assigned.deliveryUpdated).toMatchObject({ name: 'Delivery.Assigned', status: 'ASSIGNED', stale: false });
    // The repeat of the same milestone, in another case, is stale and not pushed: the next milestone, posted after it,
    // is the next message.
    await post({ uid, event_name: 'delivery.pickup_enroute', status: 'pickup_enroute' });
    const [, , next] = await sub.waitFor(3);
    expect(next.deliveryUpdated).toMatchObject({ name: 'delivery.pickup_enroute', status: 'PICKUP_ENROUTE' });
    expect(sub.items).toHaveLength(3);
    await client.dispose();
  });

  it('starts with a snapshot read from the upstream when no event is stored', async () => {
    stack.sandbox.setWebhookUrl(undefined);
    const uid = await book();
    await stack.sandbox.advance(uid);
    stack.sandbox.setWebhookUrl(`${stack.app.url}/webhooks`);
    const client = wsClient(stack.app.url, stack.key);
    const sub = collect(client, UPDATED, { uid });
    const [first] = await sub.waitFor(1);
    expect(first.deliveryUpdated).toMatchObject({ name: 'snapshot', status: 'ASSIGNED', uid, stale: false });
    expect(first.deliveryUpdated.delivery.courier.name).toBeTruthy();
    await stack.sandbox.advance(uid);
    const [, second] = await sub.waitFor(2);
    expect(second.deliveryUpdated.status).toBe('PICKUP_ENROUTE');
    await client.dispose();
  });

  it('yields the non-stale sequence exactly once when the sandbox duplicates and shuffles webhooks', async () => {
    stack.sandbox.setKnobs({ duplicateRate: 1, reorderRate: 0.5 });
    try {
      const uid = await book();
      const client = wsClient(stack.app.url, stack.key);
      const sub = collect(client, UPDATED, { uid });
      await sub.waitFor(1);
      await advanceAll(uid);
      await stack.sandbox.idle();
      await sub.done;
      const seen = sub.items.map((item) => item.deliveryUpdated);
      const history = await stack.gql(
        'query($uid: ID!) { delivery(uid: $uid) { events { edges { node { name stale cursor } } } } }',
        { uid },
      );
      const stored = history.data.delivery.events.edges.map((edge: any) => edge.node);
      // Each event stored once, whatever the sandbox sent twice.
      const keys = stored.map((event: any) => event.name);
      expect(new Set(keys.filter((name: string) => name.startsWith('delivery.'))).size).toBe(
        keys.filter((name: string) => name.startsWith('delivery.')).length,
      );
      const accepted = stored.filter((event: any) => !event.stale && event.name.startsWith('delivery.'));
      // After the first message (the state when subscribing), exactly the accepted events that came later, in log
      // order.
      const rank = (status: string) => ['CREATED', ...MILESTONES].indexOf(status);
      const statusOf = (name: string) => name.slice('delivery.'.length).toUpperCase();
      const first = seen[0];
      const [firstAt] = await positionsOf([first.cursor]);
      const acceptedAt = await positionsOf(accepted.map((e: any) => e.cursor));
      const expected = accepted
        .filter((e: any, i: number) => acceptedAt[i]! > firstAt! && rank(statusOf(e.name)) > rank(first.status))
        .map((e: any) => e.cursor);
      expect(seen.slice(1).map((u) => u.cursor)).toEqual(expected);
      const ranks = seen.map((u) => ['CREATED', ...MILESTONES].indexOf(u.status));
      expect(ranks).toEqual([...new Set(ranks)].sort((a, b) => a - b));
      expect(seen.at(-1).status).toBe('DROPOFF_COMPLETE');
      await client.dispose();
    } finally {
      stack.sandbox.setKnobs({ duplicateRate: 0, reorderRate: 0 });
    }
  });
});

describe('courierLocation', () => {
  it('follows the courier as it moves, milestone by milestone', async () => {
    const uid = await book();
    const client = wsClient(stack.app.url, stack.key);
    const sub = collect(client, LOCATION, { uid });
    await advanceAll(uid);
    await stack.sandbox.idle();
    await sub.done;
    const positions = sub.items.map((item) => item.courierLocation);
    expect(positions.length).toBeGreaterThanOrEqual(6);
    expect(['assigned', 'assigned_driver']).toContain(positions[0].milestone);
    expect(new Set(positions.map((p) => `${p.location.lat},${p.location.lng}`)).size).toBeGreaterThan(3);
    expect(positions.every((p) => p.uid === uid && p.courier?.name)).toBe(true);
    await client.dispose();
  });

  it('drops a position from an earlier milestone', async () => {
    const uid = await book();
    await advanceAll(uid, 5); // dropoff_enroute
    await stack.sandbox.idle();
    const client = wsClient(stack.app.url, stack.key);
    const sub = collect(client, LOCATION, { uid });
    const [latest] = await sub.waitFor(1);
    expect(latest.courierLocation.milestone).toBe('dropoff_enroute');
    expect(
      (await post({ uid, event_name: 'location.pickup_enroute', driver_location: { lat: 1, lng: 1 } })).status,
    ).toBe(200);
    expect(
      (await post({ uid, event_name: 'location.dropoff_enroute', driver_location: { lat: 2, lng: 2 } })).status,
    ).toBe(200);
    const [, next] = await sub.waitFor(2);
    expect(next.courierLocation.location).toEqual({ lat: 2, lng: 2 });
    expect(sub.items).toHaveLength(2);
    await client.dispose();
  });
});

describe('courierLocation with a malformed position', () => {
  it('skips an event whose driver_location is not a usable point, and carries on', async () => {
    const uid = await book();
    const client = wsClient(stack.app.url, stack.key);
    // No position is stored yet, so no first message: the listener attaching says the subscription is live.
    const attached = listenersAttached(stack.app.services.bus);
    const sub = collect(client, LOCATION, { uid });
    await attached;
    await post({ uid, event_name: 'location.pickup_enroute', driver_location: { lat: 'north', lng: null } });
    await post({ uid, event_name: 'location.pickup_enroute', driver_location: { lat: 37.77, lng: -122.41 } });
    const [first] = await sub.waitFor(1);
    expect(first.courierLocation.location).toEqual({ lat: 37.77, lng: -122.41 });
    // The next position is the next message: the malformed one was skipped, not sent late, and nothing failed.
    await post({ uid, event_name: 'location.pickup_enroute', driver_location: { lat: 37.78, lng: -122.42 } });
    const [, second] = await sub.waitFor(2);
    expect(second.courierLocation.location).toEqual({ lat: 37.78, lng: -122.42 });
    expect(sub.items).toHaveLength(2);
    expect(sub.errors).toEqual([]);
    await client.dispose();
  });
});

describe('deliveryEvents', () => {
  it('replays after a cursor, then goes live, with no gap and no duplicate under concurrent arrivals', async () => {
    const uid = await book();
    // Status events: never coalesced, so every one must arrive (all but the first are stale, and still in the log).
    const send = (i: number) => post({ uid, event_name: 'delivery.assigned', status: `tick ${i}` });
    const before = await Promise.all(Array.from({ length: 50 }, (_, i) => send(i).then((r) => r.json())));
    // The receiver answers the upstream with log positions; the merchant's cursor for the tenth:
    const cursors = before.map((b: any) => Number(b.cursor)).sort((a, b) => a - b);
    const after = (await cursorsOf()).cursorOf(cursors[9]!);

    const client = wsClient(stack.app.url, stack.key);
    const sending = Promise.all(Array.from({ length: 150 }, (_, i) => send(50 + i)));
    const sub = collect(client, EVENTS, { uids: [uid], after });
    await sending;
    // The booking's delivery.created (sent by the sandbox whenever it gets to it) is stored too; then one last
    // event: once it arrived, everything before it in the log has (or never will), duplicates included.
    await stack.sandbox.idle();
    const last = (await (await send(200)).json()) as { cursor: string };
    const lastCursor = (await cursorsOf()).cursorOf(Number(last.cursor));
    await sub.waitForItem((item) => item.deliveryEvents.cursor === lastCursor);
    const seen = sub.items.map((item) => item.deliveryEvents.cursor as string);
    expect(new Set(seen).size).toBe(seen.length);
    const positions = await positionsOf(seen);
    expect([...positions].sort((a, b) => a - b)).toEqual(positions);
    const history = await stack.gql(
      'query($uid: ID!, $after: String) { delivery(uid: $uid) { events(after: $after) { edges { cursor } } } }',
      { uid, after },
    );
    expect(seen).toEqual(history.data.delivery.events.edges.map((edge: any) => edge.cursor));
    await client.dispose();
  });

  it('shows each merchant only its own deliveries', async () => {
    const a = wsClient(stack.app.url, stack.key);
    const b = wsClient(stack.app.url, stack.otherKey);
    const attached = listenersAttached(stack.app.services.bus, 2);
    const subA = collect(a, EVENTS, {});
    const subB = collect(b, EVENTS, {});
    await attached;
    const mine = await book(stack.key);
    const theirs = await book(stack.otherKey);
    await stack.sandbox.advance(mine);
    await stack.sandbox.advance(theirs);
    await stack.sandbox.idle();
    // One more event of each, mine then theirs: once a subscriber has its own, every event before it in the
    // log was either sent to it or never will be (theirs, last of all, has the same uid as events A was not sent).
    await post({ uid: mine, event_name: 'delivery.pickup_enroute', status: 'last of mine' });
    await post({ uid: theirs, event_name: 'delivery.pickup_enroute', status: 'last of theirs' });
    await subA.waitForItem(
      (item) => item.deliveryEvents.uid === mine && item.deliveryEvents.name === 'delivery.pickup_enroute',
    );
    await subB.waitForItem(
      (item) => item.deliveryEvents.uid === theirs && item.deliveryEvents.name === 'delivery.pickup_enroute',
    );
    expect(new Set(subA.items.map((item) => item.deliveryEvents.uid))).toEqual(new Set([mine]));
    expect(new Set(subB.items.map((item) => item.deliveryEvents.uid))).toEqual(new Set([theirs]));
    await a.dispose();
    await b.dispose();
  });

  it('refuses a cursor that is not one', async () => {
    const client = wsClient(stack.app.url, stack.key);
    const sub = collect(client, EVENTS, { after: 'not-a-cursor' });
    await sub.done;
    expect(JSON.stringify(sub.errors)).toContain('not a cursor');
    await client.dispose();
  });
});

describe('who sees what', () => {
  it('refuses a connection without a key', async () => {
    let closeCode = 0;
    const client = wsClient(stack.app.url, undefined, { onClose: (code) => (closeCode = code) });
    const sub = collect(client, UPDATED, { uid: 'x' });
    await sub.done;
    expect(closeCode).toBe(4403);
    await client.dispose();
  });

  it('gives an error, and no event, for another merchant’s delivery', async () => {
    const theirs = await book(stack.otherKey);
    const client = wsClient(stack.app.url, stack.key);
    const sub = collect(client, UPDATED, { uid: theirs });
    await sub.done;
    expect(sub.items).toEqual([]);
    expect(JSON.stringify(sub.errors)).toContain('NOT_FOUND');
    await client.dispose();
  });
});

describe('arguments written in the document', () => {
  // Arguments may be literals, or variables with any name: each field reads its own.
  it('deliveryUpdated and courierLocation take a literal uid', async () => {
    const uid = await book();
    const client = wsClient(stack.app.url, stack.key);
    const updates = collect(client, `subscription { deliveryUpdated(uid: "${uid}") { uid status } }`);
    const positions = collect(client, `subscription { courierLocation(uid: "${uid}") { uid milestone } }`);
    await updates.waitFor(1);
    await advanceAll(uid);
    await updates.done;
    await positions.done;
    expect(updates.errors).toEqual([]);
    expect(updates.items.map((item) => item.deliveryUpdated.uid)).toEqual(Array(updates.items.length).fill(uid));
    expect(updates.items.at(-1).deliveryUpdated.status).toBe('DROPOFF_COMPLETE');
    expect(positions.errors).toEqual([]);
    expect(positions.items.length).toBeGreaterThan(0);
    await client.dispose();
  });

  it('deliveryEvents filters and replays with literal arguments and with variables named otherwise', async () => {
    const uid = await book();
    const other = await book();
    const own = await cursorsOf();
    const atFirst = (await post({ uid, event_name: 'delivery.assigned', status: 'one' }).then((r) => r.json())) as {
      cursor: string;
    };
    await post({ uid: other, event_name: 'delivery.assigned', status: 'elsewhere' });
    const atLast = (await post({ uid, event_name: 'delivery.pickup_enroute', status: 'two' }).then((r) =>
      r.json(),
    )) as { cursor: string };
    const [first, last] = [atFirst, atLast].map((answer) => own.cursorOf(Number(answer.cursor)));
    const client = wsClient(stack.app.url, stack.key);
    const literal = collect(
      client,
      `subscription { deliveryEvents(uids: ["${uid}"], after: "${first}") { cursor uid } }`,
    );
    const renamed = collect(
      client,
      'subscription($which: [ID!], $from: String) { deliveryEvents(uids: $which, after: $from) { cursor uid } }',
      {
        which: [uid],
        from: first,
      },
    );
    for (const sub of [literal, renamed]) {
      const [replayed] = await sub.waitFor(1);
      expect(sub.errors).toEqual([]);
      expect(replayed.deliveryEvents).toEqual({ cursor: last, uid });
    }
    // Live after the replay, still filtered: the next event of the delivery is the next message.
    await post({ uid: other, event_name: 'delivery.pickup_enroute', status: 'elsewhere again' });
    const atNext = (await post({ uid, event_name: 'delivery.pickup_arrived', status: 'three' }).then((r) =>
      r.json(),
    )) as { cursor: string };
    const next = own.cursorOf(Number(atNext.cursor));
    for (const sub of [literal, renamed]) {
      const [, live] = await sub.waitFor(2);
      expect(live.deliveryEvents).toEqual({ cursor: next, uid });
      expect(sub.items).toHaveLength(2);
    }
    await client.dispose();
  });

  it('over SSE too', async () => {
    const uid = await book();
    const response = await fetch(`${stack.app.url}/graphql`, {
      method: 'POST',
      headers: {
        'content-type': 'application/json',
        accept: 'text/event-stream',
        authorization: `Bearer ${stack.key}`,
      },
      body: JSON.stringify({ query: `subscription { deliveryUpdated(uid: "${uid}") { uid status } }` }),
    });
    const reader = response.body!.getReader();
    let text = '';
    while (!text.includes('"status":"CREATED"') && !text.includes('errors'))
      text += new TextDecoder().decode((await reader.read()).value);
    await reader.cancel();
    expect(text).toContain(`"uid":"${uid}"`);
    expect(text).not.toContain('errors');
  });
});

describe('deliveryEvents when the upstream cannot say who may see an event', () => {
  // A partner order seeded at the sandbox: the facade did not book it, so whether
  // the key may see its events is asked of the upstream (GET /orders/{uid}).
  let faulty: Stack;
  let proxy: FaultProxy;
  beforeAll(async () => {
    faulty = await startStack({ sandbox: { privateKeyPem: await exportPKCS8(privateKey) }, faultProxy: true });
    proxy = faulty.proxy!;
  });
  afterAll(() => faulty?.stop());

  const sendTo = async (target: Stack, event: Record<string, unknown>) => {
    const token = await new SignJWT({ payload: event })
      .setProtectedHeader({ alg: 'RS256' })
      .setIssuer(target.sandbox.issuer)
      .setExpirationTime('5m')
      .sign(privateKey);
    const response = await fetch(`${target.app.url}/webhooks`, {
      method: 'POST',
      headers: { authorization: `Bearer ${token}` },
      body: JSON.stringify(event),
    });
    expect(response.status).toBe(200);
  };
  const failOrderReads = (times: number) => {
    let failures = 0;
    proxy.fault = (req, res) => {
      if (req.method !== 'GET' || !/\/orders\/[0-9a-f-]{36}$/.test(req.url ?? '') || failures >= times) return false;
      failures += 1;
      res.writeHead(500, { 'content-type': 'application/json' }).end('{"code":"boom","message":"down"}');
      return true;
    };
  };

  it('waits and asks again, then delivers the events in order', async () => {
    const client = wsClient(faulty.app.url, faulty.key);
    const attached = listenersAttached(faulty.app.services.bus);
    const sub = collect(client, 'subscription { deliveryEvents { cursor uid name } }');
    await attached;
    failOrderReads(2);
    // Seeding makes the sandbox send delivery.created; its access check meets the outage.
    const order = faulty.sandbox.seedPartnerOrder(faulty.key, { partner_reference: 'outage-1' });
    await sendTo(faulty, { uid: order.uid, event_name: 'delivery.assigned', status: 'assigned' });
    const events = (await sub.waitFor(2, 8_000)).map((event) => event.deliveryEvents);
    expect(events.map((event) => event.name).sort()).toEqual(['delivery.assigned', 'delivery.created']);
    expect(events.every((event) => event.uid === order.uid)).toBe(true);
    // In log order, as always.
    const [firstAt, secondAt] = await positionsOf([events[0].cursor, events[1].cursor], faulty);
    expect(firstAt).toBeLessThan(secondAt!);
    expect(sub.errors).toEqual([]);
    proxy.fault = undefined;
    await client.dispose();
  });

  it('ends the stream with the upstream error, rather than skip the event, when the upstream stays down', async () => {
    const client = wsClient(faulty.app.url, faulty.key);
    const attached = listenersAttached(faulty.app.services.bus);
    const sub = collect(client, 'subscription { deliveryEvents { uid name } }');
    await attached;
    failOrderReads(1_000);
    faulty.sandbox.seedPartnerOrder(faulty.key, { partner_reference: 'outage-2' });
    await sub.done;
    proxy.fault = undefined;
    expect(sub.items).toEqual([]);
    expect(JSON.stringify(sub.errors)).toContain('UPSTREAM_UNAVAILABLE');
    await client.dispose();
  }, 15_000);
});

describe('server-sent events', () => {
  it('serves deliveryUpdated over SSE too', async () => {
    const uid = await book();
    const controller = new AbortController();
    const response = await fetch(`${stack.app.url}/graphql`, {
      method: 'POST',
      headers: {
        'content-type': 'application/json',
        accept: 'text/event-stream',
        authorization: `Bearer ${stack.key}`,
      },
      body: JSON.stringify({ query: UPDATED, variables: { uid } }),
      signal: controller.signal,
    });
    expect(response.headers.get('content-type')).toContain('text/event-stream');
    const reader = response.body!.getReader();
    let text = '';
    while (!text.includes('"status":"CREATED"')) text += new TextDecoder().decode((await reader.read()).value);
    controller.abort();
  });
});

describe('slow consumers', () => {
  it('disconnects a subscriber that stops reading, with a clear close reason', async () => {
    const slow = await startStack({
      env: { SUBSCRIBER_MAX_PENDING: '20' },
      sandbox: { privateKeyPem: await exportPKCS8(privateKey) },
    });
    try {
      const uid = (await slow.gql(CREATE, { input: deliveryInput() })).data.createDelivery.data.uid;
      const socket = new WebSocket(`${slow.app.url.replace('http', 'ws')}/graphql`, 'graphql-transport-ws');
      const closed = new Promise<{ code: number; reason: string }>((resolve) =>
        socket.on('close', (code, reason) => resolve({ code, reason: reason.toString() })),
      );
      await new Promise((resolve) => socket.once('open', resolve));
      socket.send(JSON.stringify({ type: 'connection_init', payload: { Authorization: `Bearer ${slow.key}` } }));
      await new Promise((resolve) => socket.once('message', resolve));
      const bigSelection = `cursor uid name status statusText receivedAt stale delivery { uid status rawStatus pickup { name phone email instructions address { street city country latitude longitude } } dropoff { name phone address { street city country } } package { description requirements } payload }`;
      const attached = listenersAttached(slow.app.services.bus);
      socket.send(
        JSON.stringify({
          id: '1',
          type: 'subscribe',
          payload: {
            query: `subscription($uids: [ID!]) { deliveryEvents(uids: $uids) { ${bigSelection} } }`,
            variables: { uids: [uid] },
          },
        }),
      );
      await attached;
      // Stop reading: the kernel buffers fill, the server's sends stall, its queue grows.
      (socket as unknown as { _socket: { pause(): void } })._socket.pause();
      const padding = 'x'.repeat(4000);
      const sign = async (i: number) => {
        const event = { uid, event_name: 'delivery.failed', status: `status-${i}`, platform_payload: { padding, i } };
        const token = await new SignJWT({ payload: event })
          .setProtectedHeader({ alg: 'RS256' })
          .setIssuer(slow.sandbox.issuer)
          .setExpirationTime('5m')
          .sign(privateKey);
        return fetch(`${slow.app.url}/webhooks`, {
          method: 'POST',
          headers: { authorization: `Bearer ${token}` },
          body: JSON.stringify(event),
        });
      };
      const result = await Promise.race([
        closed,
        (async () => {
          for (let i = 0; i < 4000; i += 50) await Promise.all(Array.from({ length: 50 }, (_, j) => sign(i + j)));
          return undefined;
        })(),
      ]);
      (socket as unknown as { _socket: { resume(): void } })._socket.resume();
      const { code, reason } = result ?? (await closed);
      expect(code).toBe(4008);
      expect(reason).toMatch(/too slow/);
    } finally {
      await slow.stop();
    }
    // It waits on the close, not on a clock: signing and storing hundreds of 4 KB webhooks until the buffers fill takes
    // 10-20 s on a busy 2-core machine.
  }, 60_000);

  it('keeps a reader that keeps up through a burst bigger than SUBSCRIBER_MAX_PENDING', async () => {
    const bursty = await startStack({
      env: { SUBSCRIBER_MAX_PENDING: '20' },
      sandbox: { privateKeyPem: await exportPKCS8(privateKey) },
    });
    try {
      const uid = (await bursty.gql(CREATE, { input: deliveryInput() })).data.createDelivery.data.uid;
      // The booking's own delivery.created webhook is stored first, so only the burst is live after subscribing.
      await waitUntil(
        async () => (await bursty.app.services.store.eventsAfter(0, 1, { uids: [uid] })).length > 0,
        "the booking's delivery.created stored",
      );
      let closedWith: number | undefined;
      const client = wsClient(bursty.app.url, bursty.key, { onClose: (code) => (closedWith = code) });
      const attached = listenersAttached(bursty.app.services.bus);
      const sub = collect(client, EVENTS, { uids: [uid] });
      await attached;
      const sign = async (i: number) => {
        const event = { uid, event_name: 'delivery.assigned', status: `burst-${i}` };
        const token = await new SignJWT({ payload: event })
          .setProtectedHeader({ alg: 'RS256' })
          .setIssuer(bursty.sandbox.issuer)
          .setExpirationTime('5m')
          .sign(privateKey);
        return fetch(`${bursty.app.url}/webhooks`, {
          method: 'POST',
          headers: { authorization: `Bearer ${token}` },
          body: JSON.stringify(event),
        });
      };
      // 300 at once: group commits store (and publish) them many at a time.
      const answers = await Promise.all(Array.from({ length: 300 }, (_, i) => sign(i)));
      expect(answers.every((answer) => answer.status === 200)).toBe(true);
      const items = await sub.waitFor(300, 10_000);
      expect(new Set(items.map((item) => item.deliveryEvents.cursor)).size).toBe(300);
      expect(sub.errors).toEqual([]);
      expect(closedWith).toBeUndefined();
      await client.dispose();
    } finally {
      await bursty.stop();
    }
  });

  // Over server-sent events, whichever accept header chose the path through the
  // facade, a reader that stops is ended with SUBSCRIBER_TOO_SLOW instead of
  // being buffered in the server's memory without bound (the kernel's socket
  // buffers, up to tens of MB on loopback, fill first).
  for (const accept of ['text/event-stream', '*/*']) {
    it(`ends an SSE subscription that stops reading with SUBSCRIBER_TOO_SLOW (accept: ${accept})`, async () => {
      const slow = await startStack({
        env: { SUBSCRIBER_MAX_PENDING: '20' },
        sandbox: { privateKeyPem: await exportPKCS8(privateKey) },
      });
      try {
        const uid = (await slow.gql(CREATE, { input: deliveryInput() })).data.createDelivery.data.uid;
        const query = `subscription($uids: [ID!]) { deliveryEvents(uids: $uids) { cursor uid name status statusText } }`;
        const chunks: Buffer[] = [];
        const response = await new Promise<import('node:http').IncomingMessage>((resolve, reject) => {
          const req = httpRequest(`${slow.app.url}/graphql`, {
            method: 'POST',
            headers: { 'content-type': 'application/json', accept, authorization: `Bearer ${slow.key}` },
          });
          req.once('response', resolve).once('error', reject);
          req.end(JSON.stringify({ query, variables: { uids: [uid] } }));
        });
        expect(response.headers['content-type']).toContain('text/event-stream');
        response.on('data', (chunk: Buffer) => chunks.push(chunk));
        await waitUntil(() => slow.app.services.bus.listenerCount() > 0, 'the SSE subscription to attach');
        response.pause();
        // Big events (the status text is echoed), so the kernel's socket buffers (up to tens of MB) fill quickly.
        const padding = 'x'.repeat(6_000); // the signed token travels in a header, which Node caps at 16 KB
        const sign = async (i: number) => {
          const event = { uid, event_name: 'delivery.failed', status: `status-${i}-${padding}` };
          const token = await new SignJWT({ payload: event })
            .setProtectedHeader({ alg: 'RS256' })
            .setIssuer(slow.sandbox.issuer)
            .setExpirationTime('5m')
            .sign(privateKey);
          return fetch(`${slow.app.url}/webhooks`, {
            method: 'POST',
            headers: { authorization: `Bearer ${token}` },
            body: JSON.stringify(event),
          });
        };
        // Ten at a time: a group commit never publishes more than SUBSCRIBER_MAX_PENDING at once,
        // so only a reader that is not reading can fall behind.
        let sent = 0;
        while (slow.app.services.bus.listenerCount() > 0 && sent < 8000) {
          await Promise.all(Array.from({ length: 10 }, (_, j) => sign(sent + j)));
          sent += 10;
        }
        expect(slow.app.services.bus.listenerCount(), 'the subscription was ended').toBe(0);
        const ended = new Promise((resolve) => response.once('end', resolve));
        response.resume();
        await ended;
        const text = Buffer.concat(chunks).toString('utf8');
        expect(text).toContain('SUBSCRIBER_TOO_SLOW');
        // 20 pending events allowed: over SSE that is 20 KiB left unsent.
        expect(text).toMatch(/subscriber too slow: more than 20480 bytes waiting to be sent/);
        expect(text.trimEnd().endsWith('event: complete\ndata:')).toBe(true);
        expect(text.split('event: next').length - 1).toBeLessThanOrEqual(sent + 1);
      } finally {
        await slow.stop();
      }
    }, 60_000);
  }
});

// One execution per event, not per subscriber (src/realtime/fanout.ts): the
// subscribers an event's message is the same for (same operation, same
// variables, same merchant key or same client-token scope) share one execution
// and one serialized payload; each still gets its own graphql-ws id, its own
// errors and its own end. Executions are counted where graphql-js runs them: the
// subscription root field's resolver runs once per execution of an event.
import { exportPKCS8, generateKeyPair, SignJWT, type CryptoKey } from 'jose';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import WebSocket from 'ws';
import type { App } from '../../src/app.js';
import { countExecutions } from '../helpers/executions.js';
import { deliveryInput, startStack, type Stack } from '../helpers/stack.js';
import { listenersAttached, waitUntil } from '../helpers/wait.js';

const CREATE = `mutation($input: DeliveryInput!) { createDelivery(input: $input) { ... on MutationCreateDeliverySuccess { data { uid } } } }`;
const CREATE_TOKEN = `mutation($uids: [ID!]!) { createClientToken(uids: $uids, ttlSeconds: 3600) { ... on MutationCreateClientTokenSuccess { data { token } } } }`;
const EVENTS = `subscription($uids: [ID!]) { deliveryEvents(uids: $uids) { cursor uid name statusText delivery { status } } }`;

let stack: Stack;
let privateKey: CryptoKey;

beforeAll(async () => {
  const pair = await generateKeyPair('RS256', { extractable: true });
  privateKey = pair.privateKey as CryptoKey;
  stack = await startStack({ sandbox: { privateKeyPem: await exportPKCS8(pair.privateKey) } });
  // Every event is the test's own: the sandbox's webhooks (a booking's delivery.created) would come at any time.
  stack.sandbox.setWebhookUrl(undefined);
});
afterAll(async () => {
  await stack?.stop();
});

async function book(key = stack.key): Promise<string> {
  return (await stack.gql(CREATE, { input: deliveryInput() }, key)).data.createDelivery.data.uid;
}

async function tokenFor(uids: string[]): Promise<string> {
  return (await stack.gql(CREATE_TOKEN, { uids })).data.createClientToken.data.token;
}

let posted = 0;
/** Signs and posts one event as the upstream would; its status text, which names it. */
async function post(app: App, uid: string, event_name = 'delivery.pickup_enroute'): Promise<string> {
  posted += 1;
  const event = { uid, event_name, status: `step-${posted}` };
  const token = await new SignJWT({ payload: event })
    .setProtectedHeader({ alg: 'RS256' })
    .setIssuer(stack.sandbox.issuer)
    .setExpirationTime('5m')
    .sign(privateKey);
  const answer = await fetch(`${app.url}/webhooks`, {
    method: 'POST',
    headers: { authorization: `Bearer ${token}` },
    body: JSON.stringify(event),
  });
  expect(answer.status).toBe(200);
  return event.status;
}

/** The cursor of each of a delivery's events as `key` is given it by a read (Delivery.events), by status text. */
async function cursorsSeenBy(key: string, uid: string): Promise<Map<string, string>> {
  const read = await stack.gql(
    `query($uid: ID!) { delivery(uid: $uid) { events { edges { cursor node { statusText } } } } }`,
    { uid },
    key,
  );
  return new Map(
    read.data.delivery.events.edges.map((edge: { cursor: string; node: { statusText: string } }) => [
      edge.node.statusText,
      edge.cursor,
    ]),
  );
}

/** A graphql-transport-ws socket spoken by hand, so that the frames are seen as written. */
interface RawSocket {
  /** Every text frame received, as received. */
  frames: string[];
  closed: Promise<{ code: number; reason: string }>;
  subscribe(id: string, query: string, variables?: Record<string, unknown>): void;
  complete(id: string): void;
  /** The `next` frames of one operation, in order. */
  nexts(id: string): string[];
  /** Stops reading from the connection (what arrives stays in the kernel's buffers), and reads again. */
  pause(): void;
  resume(): void;
  close(): void;
}

async function rawSocket(app: App, key: string): Promise<RawSocket> {
  const socket = new WebSocket(`${app.url.replace('http', 'ws')}/graphql`, 'graphql-transport-ws');
  const frames: string[] = [];
  socket.on('message', (data) => frames.push(data.toString()));
  const closed = new Promise<{ code: number; reason: string }>((resolve) =>
    socket.on('close', (code, reason) => resolve({ code, reason: reason.toString() })),
  );
  await new Promise((resolve) => socket.once('open', resolve));
  socket.send(JSON.stringify({ type: 'connection_init', payload: { authorization: `Bearer ${key}` } }));
  await waitUntil(() => frames.some((frame) => JSON.parse(frame).type === 'connection_ack'), 'connection_ack');
  return {
    frames,
    closed,
    subscribe: (id, query, variables) =>
      socket.send(JSON.stringify({ id, type: 'subscribe', payload: { query, variables } })),
    complete: (id) => socket.send(JSON.stringify({ id, type: 'complete' })),
    nexts: (id) => frames.filter((frame) => JSON.parse(frame).type === 'next' && JSON.parse(frame).id === id),
    pause: () => (socket as unknown as { _socket: { pause(): void } })._socket.pause(),
    resume: () => (socket as unknown as { _socket: { resume(): void } })._socket.resume(),
    close: () => socket.close(),
  };
}

/** The payload of a `next` frame exactly as written: the text after `"payload":`, up to the frame's closing brace. */
function payloadText(frame: string): string {
  const at = frame.indexOf('"payload":');
  expect(at).toBeGreaterThan(0);
  return frame.slice(at + '"payload":'.length, -1);
}

describe('one execution per event', () => {
  it('executes each event once for every subscriber of a delivery with the same operation and key; each frame has its own id and the same payload bytes', async () => {
    const uid = await book();
    const sockets = [await rawSocket(stack.app, stack.key), await rawSocket(stack.app, stack.key)];
    const ids = sockets.map((_, s) => Array.from({ length: 4 }, (_, i) => `sub-${s}-${i}`));
    try {
      const attached = listenersAttached(stack.app.services.bus, 8);
      sockets.forEach((socket, s) => ids[s]!.forEach((id) => socket.subscribe(id, EVENTS, { uids: [uid] })));
      await attached;
      const executions = countExecutions(stack.app);
      const fanoutBefore = { ...stack.app.services.fanout?.counters };
      try {
        const steps = [];
        for (let step = 0; step < 3; step += 1) steps.push(await post(stack.app, uid));
        await waitUntil(
          () => sockets.every((socket, s) => ids[s]!.every((id) => socket.nexts(id).length >= 3)),
          'three messages for every subscriber',
        );
        expect(executions.counts.deliveryEvents).toBe(3);

        const cursors = await cursorsSeenBy(stack.key, uid);
        for (let step = 0; step < 3; step += 1) {
          const frames = sockets.flatMap((socket, s) => ids[s]!.map((id) => ({ id, frame: socket.nexts(id)[step]! })));
          // Each frame is its own subscriber's: its id, nothing else of the protocol changed.
          for (const { id, frame } of frames) expect(JSON.parse(frame)).toMatchObject({ id, type: 'next' });
          // And the payload is the same bytes for every one of them.
          const payloads = new Set(frames.map(({ frame }) => payloadText(frame)));
          expect(payloads.size).toBe(1);
          expect(JSON.parse([...payloads][0]!)).toEqual({
            data: {
              deliveryEvents: {
                cursor: cursors.get(steps[step]!),
                uid,
                name: 'delivery.pickup_enroute',
                statusText: steps[step],
                delivery: { status: 'PICKUP_ENROUTE' },
              },
            },
          });
        }
        // The counters /metrics reads.
        const fanout = stack.app.services.fanout!;
        expect(fanout.counters.executions - fanoutBefore.executions!).toBe(3);
        expect(fanout.counters.shared - fanoutBefore.shared!).toBe(3 * 7);
        const metrics = await (await fetch(`${stack.app.url}/metrics`)).text();
        expect(metrics).toContain(
          `delivery_graph_subscription_messages_total{made="executed"} ${fanout.counters.executions}`,
        );
        expect(metrics).toContain(
          `delivery_graph_subscription_messages_total{made="shared"} ${fanout.counters.shared}`,
        );
        expect(metrics).toMatch(/^delivery_graph_subscription_message_groups 1$/m);
      } finally {
        executions.restore();
      }
    } finally {
      for (const socket of sockets) socket.close();
    }
    // The group goes with its last subscriber.
    await waitUntil(() => stack.app.services.fanout!.groups === 0, 'no group left');
  });

  it('keeps apart subscribers with other variables or another selection', async () => {
    const uid = await book();
    const other = await book();
    const plainer = `subscription($uids: [ID!]) { deliveryEvents(uids: $uids) { cursor uid name } }`;
    const socket = await rawSocket(stack.app, stack.key);
    try {
      const attached = listenersAttached(stack.app.services.bus, 2 + 2 + 2 * 2);
      // Two each of: the operation, the same operation with other variables, another selection.
      for (const id of ['same-0', 'same-1']) socket.subscribe(id, EVENTS, { uids: [uid] });
      for (const id of ['vars-0', 'vars-1']) socket.subscribe(id, EVENTS, { uids: [uid, other] });
      for (const id of ['selection-0', 'selection-1']) socket.subscribe(id, plainer, { uids: [uid] });
      await attached;
      const executions = countExecutions(stack.app);
      try {
        await post(stack.app, uid);
        await post(stack.app, uid);
        const all = ['same-0', 'same-1', 'vars-0', 'vars-1', 'selection-0', 'selection-1'];
        await waitUntil(() => all.every((id) => socket.nexts(id).length >= 2), 'two messages for every subscriber');
        // One execution per event for each of the three groups.
        expect(executions.counts.deliveryEvents).toBe(2 * 3);
        for (const id of ['selection-0', 'selection-1'])
          expect(Object.keys(JSON.parse(socket.nexts(id)[0]!).payload.data.deliveryEvents)).toEqual([
            'cursor',
            'uid',
            'name',
          ]);
        for (const id of ['same-0', 'vars-0'])
          expect(JSON.parse(socket.nexts(id)[1]!).payload.data.deliveryEvents.delivery).toEqual({
            status: 'PICKUP_ENROUTE',
          });
      } finally {
        executions.restore();
      }
    } finally {
      socket.close();
    }
  });

  it('never shares across merchants: another merchant subscribing to the delivery gets its own error, and nothing of the owner’s messages', async () => {
    const uid = await book();
    const owner = await rawSocket(stack.app, stack.key);
    const stranger = await rawSocket(stack.app, stack.otherKey);
    try {
      const attached = listenersAttached(stack.app.services.bus, 3);
      for (const id of ['own-0', 'own-1', 'own-2']) owner.subscribe(id, EVENTS, { uids: [uid] });
      await attached;
      for (const id of ['foreign-0', 'foreign-1']) stranger.subscribe(id, EVENTS, { uids: [uid] });
      await waitUntil(
        () => stranger.frames.filter((frame) => JSON.parse(frame).type === 'complete').length === 2,
        "the stranger's subscriptions end",
      );
      const executions = countExecutions(stack.app);
      try {
        await post(stack.app, uid);
        await waitUntil(
          () => ['own-0', 'own-1', 'own-2'].every((id) => owner.nexts(id).length >= 1),
          "the owner's messages",
        );
        expect(executions.counts.deliveryEvents).toBe(1);
      } finally {
        executions.restore();
      }
      // Each of the stranger's subscriptions got its own NOT_FOUND (by its own id), as without sharing, and then
      // nothing.
      for (const id of ['foreign-0', 'foreign-1']) {
        const [only, ...rest] = stranger.nexts(id);
        expect(rest).toEqual([]);
        expect(JSON.parse(only!).payload).toMatchObject({ errors: [{ extensions: { code: 'NOT_FOUND' } }] });
        expect(JSON.parse(only!).payload.data ?? null).toBeNull();
      }
      expect(stranger.frames.join('\n')).not.toContain('step-');
    } finally {
      owner.close();
      stranger.close();
    }
  });

  it('keeps every merchant to its own cursors when each follows all its events, one execution per event and merchant', async () => {
    const mine = await book();
    const theirs = await book(stack.otherKey);
    const all = `subscription { deliveryEvents { cursor uid name } }`;
    const first = await rawSocket(stack.app, stack.key);
    const second = await rawSocket(stack.app, stack.otherKey);
    try {
      const attached = listenersAttached(stack.app.services.bus, 4);
      for (const id of ['a-0', 'a-1']) first.subscribe(id, all);
      for (const id of ['b-0', 'b-1']) second.subscribe(id, all);
      await attached;
      const executions = countExecutions(stack.app);
      try {
        const mineAt = await post(stack.app, mine);
        const theirsAt = await post(stack.app, theirs);
        await waitUntil(
          () =>
            ['a-0', 'a-1'].every((id) => first.nexts(id).length >= 1) &&
            ['b-0', 'b-1'].every((id) => second.nexts(id).length >= 1),
          'one message each',
        );
        expect(executions.counts.deliveryEvents).toBe(2);
        const [myCursor, theirCursor] = [
          (await cursorsSeenBy(stack.key, mine)).get(mineAt),
          (await cursorsSeenBy(stack.otherKey, theirs)).get(theirsAt),
        ];
        expect(myCursor).toBeDefined();
        expect(theirCursor).toBeDefined();
        for (const id of ['a-0', 'a-1'])
          expect(first.nexts(id).map((frame) => JSON.parse(frame).payload.data.deliveryEvents)).toEqual([
            { cursor: myCursor, uid: mine, name: 'delivery.pickup_enroute' },
          ]);
        for (const id of ['b-0', 'b-1'])
          expect(second.nexts(id).map((frame) => JSON.parse(frame).payload.data.deliveryEvents)).toEqual([
            { cursor: theirCursor, uid: theirs, name: 'delivery.pickup_enroute' },
          ]);
      } finally {
        executions.restore();
      }
    } finally {
      first.close();
      second.close();
    }
  });

  it('gives client tokens of one delivery a group of their own, shared by every token with that scope', async () => {
    const uid = await book();
    const [one, two] = [await tokenFor([uid]), await tokenFor([uid])];
    const sockets = [
      await rawSocket(stack.app, stack.key),
      await rawSocket(stack.app, one),
      await rawSocket(stack.app, two),
    ];
    try {
      const attached = listenersAttached(stack.app.services.bus, 6);
      sockets.forEach((socket, s) =>
        ['x', 'y'].forEach((name) => socket.subscribe(`${s}-${name}`, EVENTS, { uids: [uid] })),
      );
      await attached;
      const executions = countExecutions(stack.app);
      try {
        const at = await post(stack.app, uid);
        await waitUntil(
          () => sockets.every((socket, s) => ['x', 'y'].every((name) => socket.nexts(`${s}-${name}`).length >= 1)),
          'a message each',
        );
        // The key's subscribers, and both tokens' together.
        expect(executions.counts.deliveryEvents).toBe(2);
        const cursor = (await cursorsSeenBy(stack.key, uid)).get(at);
        expect(cursor).toBeDefined();
        for (const [s, socket] of sockets.entries()) {
          for (const name of ['x', 'y'])
            expect(JSON.parse(socket.nexts(`${s}-${name}`)[0]!).payload.data.deliveryEvents).toMatchObject({
              cursor,
              uid,
            });
        }
      } finally {
        executions.restore();
      }
    } finally {
      for (const socket of sockets) socket.close();
    }
  });

  it('lets a subscriber complete without ending or holding up the others of its group', async () => {
    const uid = await book();
    const socket = await rawSocket(stack.app, stack.key);
    const ids = ['keep-0', 'keep-1', 'leave'];
    try {
      const attached = listenersAttached(stack.app.services.bus, 3);
      for (const id of ids) socket.subscribe(id, EVENTS, { uids: [uid] });
      await attached;
      await post(stack.app, uid);
      await waitUntil(() => ids.every((id) => socket.nexts(id).length === 1), 'the first message each');
      const { bus } = stack.app.services;
      const listeningBefore = bus.listenerCount();
      socket.complete('leave');
      await waitUntil(() => bus.listenerCount() === listeningBefore - 1, 'the completed subscription stops listening');
      const executions = countExecutions(stack.app);
      try {
        await post(stack.app, uid);
        await post(stack.app, uid);
        await waitUntil(() => ['keep-0', 'keep-1'].every((id) => socket.nexts(id).length === 3), 'the others go on');
        expect(executions.counts.deliveryEvents).toBe(2);
        expect(socket.nexts('leave')).toHaveLength(1);
      } finally {
        executions.restore();
      }
      // A delivery's final event ends every stream of the group, each with its own complete.
      await post(stack.app, uid, 'delivery.dropoff_complete');
      await waitUntil(() => ['keep-0', 'keep-1'].every((id) => socket.nexts(id).length === 4), 'the final event');
    } finally {
      socket.close();
    }
  });

  it('shares over server-sent events too: one execution, the same data line for every stream', async () => {
    const uid = await book();
    const streams = await Promise.all(
      Array.from({ length: 4 }, async () => {
        const controller = new AbortController();
        const attached = listenersAttached(stack.app.services.bus);
        const response = await fetch(`${stack.app.url}/graphql`, {
          method: 'POST',
          headers: {
            'content-type': 'application/json',
            accept: 'text/event-stream',
            authorization: `Bearer ${stack.key}`,
          },
          body: JSON.stringify({ query: EVENTS, variables: { uids: [uid] } }),
          signal: controller.signal,
        });
        expect(response.headers.get('content-type')).toMatch(/text\/event-stream/);
        const reader = response.body!.getReader();
        const decoder = new TextDecoder();
        const data: string[] = [];
        let buffered = '';
        void (async () => {
          for (;;) {
            const { done, value } = await reader.read().catch(() => ({ done: true, value: undefined }));
            if (done) return;
            buffered += decoder.decode(value, { stream: true });
            let end;
            while ((end = buffered.indexOf('\n\n')) >= 0) {
              const event = buffered.slice(0, end);
              buffered = buffered.slice(end + 2);
              if (event.startsWith('event: next\n')) data.push(event.slice('event: next\ndata: '.length));
            }
          }
        })();
        await attached;
        return { data, stop: () => controller.abort() };
      }),
    );
    const executions = countExecutions(stack.app);
    try {
      await post(stack.app, uid);
      await post(stack.app, uid);
      await waitUntil(() => streams.every((stream) => stream.data.length >= 2), 'two messages on every stream');
      expect(executions.counts.deliveryEvents).toBe(2);
      for (const step of [0, 1]) {
        const lines = new Set(streams.map((stream) => stream.data[step]));
        expect(lines.size).toBe(1);
        expect(JSON.parse([...lines][0]!).data.deliveryEvents).toMatchObject({ uid, name: 'delivery.pickup_enroute' });
      }
    } finally {
      executions.restore();
      for (const stream of streams) stream.stop();
    }
  });
});

describe('a slow subscriber', () => {
  let slow: Stack;
  beforeAll(async () => {
    slow = await startStack({
      env: { SUBSCRIBER_MAX_PENDING: '2' },
      sandbox: { privateKeyPem: await exportPKCS8(privateKey) },
    });
    slow.sandbox.setWebhookUrl(undefined);
  });
  afterAll(async () => {
    await slow?.stop();
  });

  it('is cut off with 4008 on its own, while the others of its group get every event', async () => {
    const uid = (await slow.gql(CREATE, { input: deliveryInput() })).data.createDelivery.data.uid as string;
    const query = `subscription($uids: [ID!]) { deliveryEvents(uids: $uids) { uid statusText delivery { payload } } }`;
    const reader = await rawSocket(slow.app, slow.key);
    const stalled = await rawSocket(slow.app, slow.key);
    const { bus } = slow.app.services;
    try {
      const attached = listenersAttached(bus, 3);
      reader.subscribe('fast-0', query, { uids: [uid] });
      reader.subscribe('fast-1', query, { uids: [uid] });
      stalled.subscribe('slow', query, { uids: [uid] });
      await attached;
      // It stops reading: the kernel's buffers fill, the server's writes to it stall, its queue grows past
      // SUBSCRIBER_MAX_PENDING.
      stalled.pause();
      // The server closing a socket with 4008 (ws's close on the server's side of it; its close frame waits in the
      // stalled connection).
      let cut = false;
      const close = WebSocket.prototype.close;
      WebSocket.prototype.close = function (this: WebSocket, code?: number, reason?: string | Buffer) {
        if (code === 4008) cut = true;
        return close.call(this, code, reason);
      };
      const executions = countExecutions(slow.app);
      const padding = 'x'.repeat(150_000);
      let sent = 0;
      try {
        // Events until the server cuts it off, however large the connection's buffers are.
        while (!cut) {
          expect(sent).toBeLessThan(1000);
          const event = {
            uid,
            event_name: 'delivery.pickup_enroute',
            status: `big-${sent}`,
            platform_payload: { padding },
          };
          const token = await new SignJWT({ payload: event })
            .setProtectedHeader({ alg: 'RS256' })
            .setIssuer(slow.sandbox.issuer)
            .setExpirationTime('5m')
            .sign(privateKey);
          const answer = await fetch(`${slow.app.url}/webhooks`, {
            method: 'POST',
            headers: { authorization: `Bearer ${token}` },
            body: JSON.stringify(event),
          });
          expect(answer.status).toBe(200);
          sent += 1;
        }
        await waitUntil(
          () => ['fast-0', 'fast-1'].every((id) => reader.nexts(id).length === sent),
          'every event for the readers that keep up',
          30_000,
        );
        expect(executions.counts.deliveryEvents).toBe(sent);
      } finally {
        executions.restore();
        WebSocket.prototype.close = close;
      }
      stalled.resume();
      expect(await stalled.closed).toMatchObject({ code: 4008, reason: expect.stringMatching(/too slow/) });
      expect(stalled.nexts('slow').length).toBeLessThan(sent);
      for (const id of ['fast-0', 'fast-1'])
        expect(reader.nexts(id).map((frame) => JSON.parse(frame).payload.data.deliveryEvents.statusText)).toEqual(
          Array.from({ length: sent }, (_, n) => `big-${n}`),
        );
      await waitUntil(() => bus.listenerCount() === 2, 'the slow stream stops listening');
    } finally {
      reader.close();
      stalled.close();
    }
  });
});

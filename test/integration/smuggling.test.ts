// Request smuggling against the real server (issue 37): Node's HTTP parser alone
// decides where a request ends. Each ambiguous framing (Content-Length beside
// Transfer-Encoding, empty, odd and repeated Transfer-Encoding values, obs-fold,
// bare LF) is sent on a raw socket with a booking pipelined behind it: Node either
// refuses the first with 400 and closes, and then the booking never reaches a
// handler, or frames it by its own rule, and then the booking is answered as the
// request it framed. The upstream's request log says which bookings were made. The
// same holds on a slot kept for webhooks, and behind a refused head.
import { once } from 'node:events';
import { connect, type Socket } from 'node:net';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { deliveryInput, startStack, type Stack } from '../helpers/stack.js';

/** Writes `raw` on a fresh connection (from `localAddress`) and returns what came back before the server closed it. */
async function exchange(url: string, raw: string, { waitMs = 3_000, localAddress = '127.0.0.1' } = {}) {
  const socket = connect({ port: Number(new URL(url).port), host: '127.0.0.1', localAddress });
  socket.on('error', () => undefined);
  await once(socket, 'connect');
  let received = '';
  socket.on('data', (chunk: Buffer) => (received += chunk.toString('latin1')));
  const closed = once(socket, 'close').then(() => true);
  socket.write(raw);
  const byServer = await Promise.race([closed, new Promise<false>((resolve) => setTimeout(resolve, waitMs, false))]);
  socket.destroy();
  return { received, closedByServer: byServer };
}

/** The status of each answer (an answer's body does not end in a line end: the next answer follows it at once). */
const statuses = (raw: string) => [...raw.matchAll(/HTTP\/1\.1 (\d{3}) /g)].map((match) => Number(match[1]));

/**
 * A booking, as a raw POST /graphql; `padding` bytes of one more header. Unless `keepAlive`, it asks the server to close
 * the connection after answering it.
 */
function bookingRequest(key: string, { keepAlive = false, padding = 0 } = {}): string {
  const body = JSON.stringify({
    query:
      'mutation($input: DeliveryInput!) { createDelivery(input: $input) { ... on MutationCreateDeliverySuccess { data { uid } } } }',
    variables: { input: deliveryInput() },
  });
  const extra = `${keepAlive ? '' : 'connection: close\r\n'}${padding ? `x-padding: ${'p'.repeat(padding)}\r\n` : ''}`;
  return `POST /graphql HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\nauthorization: Bearer ${key}\r\n${extra}content-length: ${Buffer.byteLength(body)}\r\n\r\n${body}`;
}

/** Bookings the upstream received since `mark`. */
const bookingsSince = (stack: Stack, mark: number) =>
  stack.sandbox.requestsSince(mark).filter((request) => request.method === 'POST' && /\/deliveries$/.test(request.path))
    .length;

const QUERY = '{"query":"{ __typename }"}';
const head = (headers: string) => `POST /graphql HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n${headers}`;
const chunkedQuery = `${QUERY.length.toString(16)}\r\n${QUERY}\r\n0\r\n\r\n`;

/** Each framing, what Node answers to it, and whether the bookings pipelined behind it are requests of their own. */
const CASES: Array<{ name: string; first: string; answers: number[]; booked: boolean }> = [
  {
    name: 'Content-Length beside Transfer-Encoding: chunked',
    first: `${head('content-length: 4\r\ntransfer-encoding: chunked\r\n')}\r\n0\r\n\r\n`,
    answers: [400],
    booked: false,
  },
  {
    // Node frames by the length: the 13 bytes are the first request's body (not JSON), the booking a request of its own.
    name: 'an empty Transfer-Encoding beside Content-Length: 13',
    first: `${head('transfer-encoding: \r\ncontent-length: 13\r\n')}\r\nfffffffffffff`,
    answers: [400],
    booked: true,
  },
  {
    name: 'Transfer-Encoding: chunked, identity',
    first: `${head('transfer-encoding: chunked, identity\r\n')}\r\n${chunkedQuery}`,
    answers: [400],
    booked: false,
  },
  {
    name: 'Transfer-Encoding: xchunked',
    first: `${head('transfer-encoding: xchunked\r\n')}\r\n${chunkedQuery}`,
    answers: [400],
    booked: false,
  },
  {
    // Whitespace before a value is not part of it: this is chunked.
    name: 'Transfer-Encoding:  chunked (a space more)',
    first: `${head('transfer-encoding:  chunked\r\n')}\r\n${chunkedQuery}`,
    answers: [200],
    booked: true,
  },
  {
    name: 'Transfer-Encoding: chunked, chunked',
    first: `${head('transfer-encoding: chunked, chunked\r\n')}\r\n${chunkedQuery}`,
    answers: [400],
    booked: false,
  },
  {
    name: 'Transfer-Encoding: identity',
    first: `${head('transfer-encoding: identity\r\ncontent-length: 3\r\n')}\r\nabc`,
    answers: [400],
    booked: false,
  },
  {
    name: 'Transfer-Encoding: chunked twice',
    first: `${head('transfer-encoding: chunked\r\ntransfer-encoding: chunked\r\n')}\r\n${chunkedQuery}`,
    answers: [400],
    booked: false,
  },
  {
    name: 'Transfer-Encoding: chunked, then an empty one beside Content-Length',
    first: `${head('transfer-encoding: chunked\r\ntransfer-encoding: \r\ncontent-length: 5\r\n')}\r\n${chunkedQuery}`,
    answers: [400],
    booked: false,
  },
  {
    // Repeated headers are one list: identity, chunked ends in chunked.
    name: 'Transfer-Encoding: identity, then Transfer-Encoding: chunked',
    first: `${head('transfer-encoding: identity\r\ntransfer-encoding: chunked\r\n')}\r\n${chunkedQuery}`,
    answers: [200],
    booked: true,
  },
  {
    name: 'Transfer-Encoding: chunked, then Transfer-Encoding: identity',
    first: `${head('transfer-encoding: chunked\r\ntransfer-encoding: identity\r\n')}\r\n${chunkedQuery}`,
    answers: [400],
    booked: false,
  },
  {
    name: 'Transfer-Encoding folded onto a second line (obs-fold)',
    first: `${head('transfer-encoding:\r\n chunked\r\ncontent-length: 4\r\n')}\r\n0\r\n\r\n`,
    answers: [400],
    booked: false,
  },
  {
    name: 'another header folded (obs-fold)',
    first: `${head(`x-note: a\r\n b\r\ncontent-length: ${QUERY.length}\r\n`)}\r\n${QUERY}`,
    answers: [400],
    booked: false,
  },
  {
    name: 'a request line that ends in a bare LF',
    first: `POST /graphql HTTP/1.1\nhost: x\r\ncontent-type: application/json\r\ncontent-length: ${QUERY.length}\r\n\r\n${QUERY}`,
    answers: [400],
    booked: false,
  },
  {
    name: 'a header line that ends in a bare LF',
    first: `${head(`content-length: ${QUERY.length}\ntransfer-encoding: chunked\r\n`)}\r\n${chunkedQuery}`,
    answers: [400],
    booked: false,
  },
  {
    // Node answers it 400 itself and closes the connection after it.
    name: 'no Host',
    first: `POST /graphql HTTP/1.1\r\ncontent-type: application/json\r\ncontent-length: ${QUERY.length}\r\n\r\n${QUERY}`,
    answers: [400],
    booked: false,
  },
  {
    name: 'two different Content-Lengths',
    first: `${head(`content-length: ${QUERY.length}\r\ncontent-length: 4\r\n`)}\r\n${QUERY}`,
    answers: [400],
    booked: false,
  },
];

describe('ambiguous framings, each with two bookings pipelined behind it', () => {
  let stack: Stack;
  beforeAll(async () => {
    stack = await startStack();
  });
  afterAll(() => stack?.stop());

  // The second booking's head is 100 KiB: over the 16 KiB of every path but the webhook one, however the first request
  // was framed.
  it.each(CASES)('$name: $answers', async ({ first, answers, booked }) => {
    const mark = stack.sandbox.requestCount;
    const pipelined =
      bookingRequest(stack.key, { keepAlive: true }) + bookingRequest(stack.key, { padding: 100 * 1024 });
    const { received, closedByServer } = await exchange(stack.app.url, first + pipelined);
    expect(closedByServer).toBe(true);
    if (booked) {
      // Framed by Node's rule: the first answered as it framed it, the bookings as requests of their own.
      expect(statuses(received)).toEqual([...answers, 200, 431]);
      expect(received).toMatch(/"createDelivery":\{"data":\{"uid":"[^"]+"\}\}/);
    } else {
      expect(statuses(received)).toEqual(answers);
      // The parser's refusal says what was wrong (Node's own 400 to a request without Host has no body).
      if (first.includes('host: x')) expect(received).toMatch(/"error":"bad_request"/);
    }
    // A booking answered is one the upstream made; one never answered never reached it.
    expect(bookingsSince(stack, mark)).toBe(booked ? 1 : 0);
  });

  it('never runs a booking pipelined behind a head refused for its size (431), nor one behind that', async () => {
    const mark = stack.sandbox.requestCount;
    const large = `GET /health HTTP/1.1\r\nhost: x\r\nx-padding: ${'p'.repeat(20 * 1024)}\r\n\r\n`;
    const booking = bookingRequest(stack.key, { keepAlive: true });
    const { received, closedByServer } = await exchange(stack.app.url, large + booking + booking);
    expect(statuses(received)).toEqual([431]);
    expect(closedByServer).toBe(true);
    expect(bookingsSince(stack, mark)).toBe(0);
  });
});

describe('a slot kept for webhooks on a shared port', () => {
  let stack: Stack;
  let held: Socket[] = [];
  beforeAll(async () => {
    // 16 slots, 2 of them kept for webhooks: 14 idle connections take the others.
    stack = await startStack({
      env: { MAX_CONNECTIONS: '16', WEBHOOK_CONNECTIONS: '2', MAX_CONNECTIONS_PER_ADDRESS: '0' },
    });
  });
  afterEach(() => release());
  afterAll(() => stack?.stop());

  // On a connection of its own, closed after the answer: a kept-alive one would hold a slot.
  const metrics = async () =>
    (await exchange(stack.app.url, 'GET /metrics HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n')).received;
  /** Requests refused on a slot kept for webhooks so far (asked with the slots free: /metrics needs one too). */
  const slotRefusals = async () =>
    Number(
      /^delivery_graph_connection_refusals_total\{reason="webhook_slots"\} (\d+)$/m.exec(await metrics())?.[1] ?? 0,
    );

  /** Closes the idle connections, and waits until the server has let go of them too. */
  async function release(): Promise<void> {
    for (const socket of held) socket.destroy();
    held = [];
    while (Number(/^delivery_graph_open_connections\{listener="main"\} (\d+)$/m.exec(await metrics())?.[1]) > 1)
      await new Promise((resolve) => setTimeout(resolve, 20));
  }

  /** Takes every shared slot with an idle kept-alive connection. */
  async function takeSharedSlots(): Promise<void> {
    held = await Promise.all(
      Array.from({ length: 14 }, async () => {
        const socket = connect(Number(new URL(stack.app.url).port), '127.0.0.1');
        socket.on('error', () => undefined);
        await once(socket, 'connect');
        socket.write('GET /health HTTP/1.1\r\nhost: attacker\r\n\r\n');
        await once(socket, 'data');
        return socket;
      }),
    );
  }

  const webhook = (headers = 'content-length: 2\r\n', body = '{}') =>
    `POST /webhooks HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\nauthorization: Bearer not-a-token\r\n${headers}\r\n${body}`;

  it.each([
    ['a webhook', webhook()],
    [
      'a webhook with an empty Transfer-Encoding beside Content-Length: 13',
      webhook('transfer-encoding: \r\ncontent-length: 13\r\n', 'fffffffffffff'),
    ],
  ])('answers %s and never runs the booking pipelined behind it', async (_name, first) => {
    const refusedBefore = await slotRefusals();
    await takeSharedSlots();
    const mark = stack.sandbox.requestCount;
    const { received, closedByServer } = await exchange(stack.app.url, first + bookingRequest(stack.key));
    expect(statuses(received)).toEqual([401]);
    expect(received).toMatch(/^connection: close$/im);
    expect(closedByServer).toBe(true);
    expect(bookingsSince(stack, mark)).toBe(0);
    await release();
    expect(await slotRefusals()).toBe(refusedBefore + 1);
  });

  it('answers a booking sent on it 503 before it runs, and a WebSocket upgrade too', async () => {
    await takeSharedSlots();
    const mark = stack.sandbox.requestCount;
    const booking = await exchange(stack.app.url, bookingRequest(stack.key));
    expect(statuses(booking.received)).toEqual([503]);
    expect(booking.received).toMatch(/"error":"server_busy".*kept for \/webhooks/);
    expect(bookingsSince(stack, mark)).toBe(0);
    const upgrade = await exchange(
      stack.app.url,
      'GET /graphql HTTP/1.1\r\nhost: x\r\nconnection: Upgrade\r\nupgrade: websocket\r\nsec-websocket-version: 13\r\nsec-websocket-key: dGhlIHNhbXBsZSBub25jZQ==\r\nsec-websocket-protocol: graphql-transport-ws\r\n\r\n',
    );
    expect(statuses(upgrade.received)).toEqual([503]);
    expect(upgrade.closedByServer).toBe(true);
  });
});

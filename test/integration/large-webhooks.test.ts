// Events that must not be lost and connections that must not be held (issue 13,
// points 1, 2 and 5): large webhook tokens fit, every refusal is counted and
// logged, merchant inputs are bounded so their events fit, one poisoned event
// fails only itself, and slow clients are cut off by the server's deadlines.
import { createSign, randomUUID } from 'node:crypto';
import { once } from 'node:events';
import { connect, type Socket } from 'node:net';
import { Writable } from 'node:stream';
import { exportPKCS8, generateKeyPair, SignJWT, type CryptoKey } from 'jose';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startApp, type App } from '../../src/app.js';
import { loadConfig } from '../../src/config.js';
import { INPUT_LIMITS } from '../../src/domain/limits.js';
import { createLogger } from '../../src/logger.js';
import { RedisStore } from '../../src/store/redis.js';
import { SqliteStore } from '../../src/store/sqlite.js';
import { PartialAppendError, type Store } from '../../src/store/store.js';
import { redisAvailable, startRedisServer } from '../helpers/redis.js';
import { deliveryInput, makeDataDir, startStack, type Stack } from '../helpers/stack.js';

const CREATE = /* GraphQL */ `
  mutation Create($input: DeliveryInput!) {
    createDelivery(input: $input) {
      __typename
      ... on MutationCreateDeliverySuccess {
        data {
          uid
        }
      }
      ... on ValidationError {
        fields {
          path
          message
        }
      }
    }
  }
`;
const QUOTE = /* GraphQL */ `
  mutation Quote($input: DeliveryInput!) {
    quoteDelivery(input: $input) {
      __typename
      ... on ValidationError {
        fields {
          path
          message
        }
      }
    }
  }
`;

/**
 * The JSON text of a value nested `levels` deep: {"a":{"a":{…}}}. Written as text:
 * JSON.stringify of such a value would overflow this process's own stack.
 */
function nestedJson(levels: number): string {
  return `${'{"a":'.repeat(levels - 1)}{"leaf":true}${'}'.repeat(levels - 1)}`;
}

/** JSON text of `value` with the string "<nested>" replaced by a value nested `levels` deep. */
function withNested(value: unknown, levels: number): string {
  return JSON.stringify(value).replace('"<nested>"', nestedJson(levels));
}

const text = (length: number, fill = 'x') => fill.repeat(length);

/** A realistic large order: 30 items with long names and a 13 KB payload. */
function largeOrder(): Record<string, unknown> {
  return deliveryInput({
    items: Array.from({ length: 30 }, (_, i) => ({
      name: `${i} ${text(90, 'Long product name ')}`.slice(0, 100),
      quantity: 1,
      price: '12.50',
      externalId: `sku-${i}`,
    })),
    payload: { order: 'A-1', notes: text(13_000, 'n') },
  });
}

/** Every field at its bound, in plain ASCII. */
function maximalOrder(): Record<string, unknown> {
  const short = text(INPUT_LIMITS.shortText);
  const address = {
    street: short,
    number: short,
    secondaryNumber: short,
    city: short,
    county: short,
    state: short,
    postalCode: short,
    country: short,
  };
  const base = deliveryInput();
  return {
    ...base,
    pickup: { name: short, phone: '+15550100', email: `${text(188)}@example.com`, instructions: text(512), address },
    dropoff: {
      ...(base.dropoff as object),
      name: short,
      email: `${text(188)}@example.com`,
      phone: short,
      instructions: text(INPUT_LIMITS.longText),
      address,
    },
    description: text(INPUT_LIMITS.longText),
    requirements: Array.from({ length: INPUT_LIMITS.requirements }, () => text(INPUT_LIMITS.requirementText)),
    items: Array.from({ length: INPUT_LIMITS.items }, (_, i) => ({
      name: text(INPUT_LIMITS.itemText),
      description: text(INPUT_LIMITS.itemDescription),
      externalId: text(INPUT_LIMITS.itemText),
      externalInstanceId: text(INPUT_LIMITS.itemText),
      barcode: text(INPUT_LIMITS.itemText),
      quantity: i,
      price: '999999.99',
    })),
    payload: { blob: text(INPUT_LIMITS.payloadBytes - 20) },
  };
}

async function eventNames(stack: Stack, uid: string): Promise<string[]> {
  const result = await stack.gql('query($uid: ID!) { delivery(uid: $uid) { events { edges { node { name } } } } }', {
    uid,
  });
  return result.data?.delivery?.events.edges.map((edge: { node: { name: string } }) => edge.node.name) ?? [];
}

async function untilStored(stack: Stack, uid: string, name: string): Promise<void> {
  while (!(await eventNames(stack, uid)).includes(name)) await new Promise((resolve) => setTimeout(resolve, 25));
}

describe('large orders and their webhooks', () => {
  let stack: Stack;
  beforeAll(async () => {
    stack = await startStack();
  });
  afterAll(() => stack?.stop());

  it.each([
    ['a realistic large order (30 long items, 13 KB payload)', largeOrder],
    ['an order with every field at its bound', maximalOrder],
  ])('books %s and stores its webhooks (the token fits the header limit)', async (_name, order) => {
    const result = await stack.gql(CREATE, { input: order() });
    expect(result.errors).toBeUndefined();
    expect(result.data.createDelivery).toMatchObject({ __typename: 'MutationCreateDeliverySuccess' });
    const uid = result.data.createDelivery.data.uid as string;
    await untilStored(stack, uid, 'delivery.created');
    expect(stack.app.receiver!.counters.refusals.get(431)).toBeUndefined();
  });

  it.each([
    [
      'input.pickup.name',
      () => deliveryInput({ pickup: { ...(deliveryInput().pickup as object), name: text(900_000) } }),
    ],
    [
      'input.dropoff.instructions',
      () =>
        deliveryInput({
          dropoff: { ...(deliveryInput().dropoff as object), instructions: text(INPUT_LIMITS.longText + 1) },
        }),
    ],
    [
      'input.items',
      () =>
        deliveryInput({ items: Array.from({ length: INPUT_LIMITS.items + 1 }, () => ({ name: 'x', quantity: 1 })) }),
    ],
    [
      'input.items.3.description',
      () =>
        deliveryInput({
          items: Array.from({ length: 5 }, (_, i) => ({
            name: 'x',
            description: i === 3 ? text(INPUT_LIMITS.itemDescription + 1) : 'ok',
          })),
        }),
    ],
    ['input.payload', () => deliveryInput({ payload: { blob: text(INPUT_LIMITS.payloadBytes + 1) } })],
    ['input.payload', () => withNested(deliveryInput({ payload: '<nested>' }), 5_000)],
    ['input.requirements.0', () => deliveryInput({ requirements: [text(INPUT_LIMITS.requirementText + 1)] })],
  ])('refuses an oversized %s with a ValidationError that names it, before any upstream call', async (path, order) => {
    const before = stack.sandbox.requestCount;
    for (const operation of [QUOTE, CREATE]) {
      const input = order();
      const inputJson = typeof input === 'string' ? input : JSON.stringify(input);
      const response = await fetch(`${stack.app.url}/graphql`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', authorization: `Bearer ${stack.key}` },
        body: `{"query":${JSON.stringify(operation)},"variables":{"input":${inputJson}}}`,
      });
      const result = (await response.json()) as { data: Record<string, unknown>; errors?: unknown };
      expect(result.errors).toBeUndefined();
      const answer = Object.values(
        result.data as Record<string, { __typename: string; fields: Array<{ path: string }> }>,
      )[0]!;
      expect(answer.__typename).toBe('ValidationError');
      expect(answer.fields.map((field) => field.path)).toContain(path);
    }
    expect(stack.sandbox.requestCount).toBe(before);
  });
});

describe('webhook refusals are counted and logged', () => {
  let stack: Stack;
  let app: App;
  let privateKey: CryptoKey;
  let privateKeyPem: string;
  const lines: Array<Record<string, unknown>> = [];

  beforeAll(async () => {
    const pair = await generateKeyPair('RS256', { extractable: true });
    privateKey = pair.privateKey;
    privateKeyPem = await exportPKCS8(pair.privateKey);
    stack = await startStack({ sandbox: { privateKeyPem } });
    stack.sandbox.setWebhookUrl(undefined);
    const sink = new Writable({
      write(chunk, _encoding, done) {
        for (const line of String(chunk).split('\n').filter(Boolean))
          lines.push(JSON.parse(line) as Record<string, unknown>);
        done();
      },
    });
    // A second facade on the same upstream, with a small token limit and short body deadline, logging into `lines`.
    app = await startApp(
      loadConfig({
        ...stack.env,
        DATA_DIR: makeDataDir(),
        WEBHOOK_MAX_TOKEN_BYTES: '16384',
        WEBHOOK_BODY_TIMEOUT_MS: '300',
      }),
      { logger: createLogger('warn', sink) },
    );
  });
  afterAll(async () => {
    await app?.stop();
    await stack?.stop();
  });

  const sign = (payload: unknown) =>
    new SignJWT({ payload })
      .setProtectedHeader({ alg: 'RS256' })
      .setIssuer(stack.sandbox.issuer)
      .setIssuedAt()
      .setExpirationTime('5m')
      .sign(privateKey);
  /** A token whose claims are given as JSON text (for a payload too deep for JSON.stringify here). */
  const signText = (claimsJson: string) => {
    const head = Buffer.from(JSON.stringify({ alg: 'RS256' })).toString('base64url');
    const body = Buffer.from(claimsJson).toString('base64url');
    const signature = createSign('RSA-SHA256').update(`${head}.${body}`).sign(privateKeyPem).toString('base64url');
    return `${head}.${body}.${signature}`;
  };
  const post = (token: string, body = '{}') =>
    fetch(`${app.url}/webhooks`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', authorization: `Bearer ${token}` },
      body,
    });

  it('answers 431 to a token over WEBHOOK_MAX_TOKEN_BYTES, counts it in /metrics and logs it; a token under it is stored', async () => {
    const big = await sign({ uid: randomUUID(), event_name: 'delivery.created', notes: text(40_000) });
    expect(big.length).toBeGreaterThan(16_384 + 16_384);
    expect((await post(big)).status).toBe(431);
    const small = await sign({ uid: randomUUID(), event_name: 'delivery.created', notes: text(8_000) });
    expect((await post(small)).status).toBe(200);
    const metrics = await (await fetch(`${app.url}/metrics`)).text();
    expect(metrics).toMatch(/^delivery_graph_webhook_refusals_total\{status="431"\} 1$/m);
    expect(lines).toContainEqual(expect.objectContaining({ status: 431, msg: 'webhook refused by the HTTP server' }));
  });

  it('answers 400 to an event nested thousands of levels deep, and every genuine event of the same batch is stored', async () => {
    const poison = (levels: number) =>
      signText(
        withNested(
          {
            iss: stack.sandbox.issuer,
            exp: Math.floor(Date.now() / 1000) + 300,
            payload: { uid: randomUUID(), event_name: 'delivery.created', platform_payload: '<nested>' },
          },
          levels,
        ),
      );
    const postTo = (url: string, token: string) =>
      fetch(`${url}/webhooks`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', authorization: `Bearer ${token}` },
        body: '{}',
      });
    // The attack's depth, on the facade with the default token limit: 200 genuine events and the poison arrive
    // together.
    const genuine = await Promise.all(
      Array.from({ length: 200 }, (_, i) =>
        sign({ uid: `genuine-${i}`, event_name: 'delivery.created', status: 'Created' }),
      ),
    );
    const answers = await Promise.all([
      ...genuine.map((token) => postTo(stack.app.url, token)),
      postTo(stack.app.url, poison(5_000)),
      postTo(stack.app.url, poison(5_000)),
    ]);
    const statuses = answers.map((answer) => answer.status);
    expect(statuses.slice(0, 200).every((status) => status === 200)).toBe(true);
    expect(statuses.slice(200)).toEqual([400, 400]);
    // Refused events are counted and logged.
    expect((await postTo(app.url, poison(100))).status).toBe(400);
    expect(app.receiver!.counters.refusals.get(400)).toBe(1);
    expect(lines).toContainEqual(
      expect.objectContaining({
        status: 400,
        msg: 'webhook refused',
        reason: expect.stringMatching(/nested deeper than 64/),
      }),
    );
  });

  it('cuts off a webhook whose body trickles past WEBHOOK_BODY_TIMEOUT_MS (counted as 408), while another is stored', async () => {
    const token = await sign({ uid: randomUUID(), event_name: 'delivery.created' });
    const socket = connect(Number(new URL(app.url).port), '127.0.0.1');
    await once(socket, 'connect');
    socket.write(
      `POST /webhooks HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: 100\r\nauthorization: Bearer ${token}\r\n\r\n{`,
    );
    const closed = once(socket, 'close');
    const meanwhile = await post(await sign({ uid: randomUUID(), event_name: 'delivery.created' }));
    expect(meanwhile.status).toBe(200);
    await closed;
    expect(app.receiver!.counters.refusals.get(408)).toBe(1);
  });
});

describe('connections held open', () => {
  it('closes connections whose headers do not arrive within HEADERS_TIMEOUT_MS, and refuses connections over MAX_CONNECTIONS', async () => {
    // Every slot for anyone from one address: the caps per address and for webhooks have tests of their own
    // (connection-caps).
    const stack = await startStack({
      env: {
        HEADERS_TIMEOUT_MS: '300',
        REQUEST_TIMEOUT_MS: '600',
        MAX_CONNECTIONS: '16',
        MAX_CONNECTIONS_PER_ADDRESS: '0',
        WEBHOOK_CONNECTIONS: '0',
      },
    });
    const port = Number(new URL(stack.app.url).port);
    const open = async (): Promise<Socket> => {
      const socket = connect(port, '127.0.0.1');
      await once(socket, 'connect');
      return socket;
    };
    try {
      // 16 slow clients hold every slot: the 17th is refused at once with a 503 that says why.
      const slow = await Promise.all(Array.from({ length: 16 }, open));
      for (const socket of slow) {
        socket.write('GET /health HTTP/1.1\r\nhost: x\r\n');
        // Reading, so this side notices when the server closes the connection.
        socket.on('error', () => undefined).resume();
      }
      const extra = await open();
      let refusal = '';
      extra.on('error', () => undefined).on('data', (chunk: Buffer) => (refusal += chunk.toString()));
      await once(extra, 'close');
      expect(refusal).toMatch(/^HTTP\/1\.1 503 /);
      expect(refusal).toContain('All 16 connection slots are taken (MAX_CONNECTIONS)');
      // The slow ones are cut off by the headers deadline (the server answers 408 or closes)...
      await Promise.all(slow.map((socket) => once(socket, 'close')));
      // ...and the server serves again, once it has seen each of them go (its side closes a moment after the client's).
      for (let status = 0; status !== 200;) {
        status = (await fetch(`${stack.app.url}/health`)).status;
        expect([200, 503]).toContain(status);
      }
    } finally {
      await stack.stop();
    }
  });
});

type OpenStore = () => Promise<[Store, () => Promise<void>]>;
const STORES: Array<[string, OpenStore]> = [
  [
    'SQLite',
    async () => {
      const store = new SqliteStore(makeDataDir());
      return [store, () => store.close()];
    },
  ],
];
if (redisAvailable('large-webhooks.test.ts')) {
  STORES.push([
    'Redis',
    async () => {
      const server = await startRedisServer();
      const store = RedisStore.connect(server.url);
      return [
        store,
        async () => {
          await store.close();
          await server.stop();
        },
      ];
    },
  ]);
}

describe.each(STORES)('one event that cannot be stored (%s)', (_name, open) => {
  it('fails alone: the others of its batch are stored, and the error says which', async () => {
    const [store, close] = await open();
    try {
      const poisoned = { uid: 'p', event_name: 'delivery.created' } as Record<string, unknown>;
      // A payload that cannot even be serialized stands for any per-event failure.
      Object.defineProperty(poisoned, 'status', {
        enumerable: true,
        get: () => {
          throw new Error('poisoned');
        },
      });
      const receivedAt = new Date().toISOString();
      const batch = [
        { payload: { uid: 'a', event_name: 'delivery.created' }, receivedAt },
        { payload: poisoned, receivedAt },
        { payload: { uid: 'b', event_name: 'delivery.created' }, receivedAt },
      ] as unknown as Parameters<Store['appendEvents']>[0];
      const failure = await store.appendEvents(batch).then(
        () => undefined,
        (error: unknown) => error,
      );
      expect(failure).toBeInstanceOf(PartialAppendError);
      const outcomes = (failure as PartialAppendError).outcomes;
      expect(outcomes[1]).toBeInstanceOf(Error);
      expect(
        outcomes
          .filter((outcome) => !(outcome instanceof Error))
          .map((outcome) => (outcome as { event: { uid: string } }).event.uid),
      ).toEqual(['a', 'b']);
      expect((await store.eventsAfter(0, 10)).map((event) => event.uid)).toEqual(['a', 'b']);
    } finally {
      await close();
    }
  });
});

// Connection caps where callers differ (issue 29): one address cannot take every
// slot (MAX_CONNECTIONS_PER_ADDRESS), WEBHOOK_PORT has slots no client of the main
// port can take, and on a shared port the last WEBHOOK_CONNECTIONS slots take
// webhooks only. Other client addresses are other loopback addresses (127.0.0.2…),
// which Linux routes to the same host.
import { randomUUID } from 'node:crypto';
import { once } from 'node:events';
import { connect, type Socket } from 'node:net';
import { exportPKCS8, generateKeyPair, SignJWT, type CryptoKey } from 'jose';
import { Agent, request } from 'undici';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { deliveryInput, startStack, type Stack } from '../helpers/stack.js';

const CREATE =
  'mutation($input: DeliveryInput!) { createDelivery(input: $input) { ... on MutationCreateDeliverySuccess { data { uid } } } }';
const EVENTS = 'query($uid: ID!) { delivery(uid: $uid) { events { edges { node { name } } } } }';

/** What a held connection got: its first answer's status (undefined: none), its body, and whether it is still open. */
interface Held {
  socket: Socket;
  status: number | undefined;
  body: string;
  open: boolean;
}

/**
 * Opens `count` connections from `localAddress`, each sending one GET /health and
 * then idling (kept alive); resolves once each has its first answer or is closed.
 */
async function holdConnections(url: string, count: number, localAddress: string): Promise<Held[]> {
  const port = Number(new URL(url).port);
  return Promise.all(
    Array.from({ length: count }, async () => {
      const socket = connect({ port, host: '127.0.0.1', localAddress });
      const held: Held = { socket, status: undefined, body: '', open: true };
      socket.on('error', () => undefined);
      await once(socket, 'connect');
      let received = '';
      const settled = new Promise<void>((resolve) => {
        socket.on('data', (chunk: Buffer) => {
          received += chunk.toString('latin1');
          const end = received.indexOf('\r\n\r\n');
          if (end < 0) return;
          const length = /^content-length: (\d+)/im.exec(received)?.[1];
          if (length === undefined ? received.endsWith('0\r\n\r\n') : received.length >= end + 4 + Number(length))
            resolve();
        });
        socket.on('close', () => {
          held.open = false;
          resolve();
        });
      });
      socket.write('GET /health HTTP/1.1\r\nhost: attacker\r\n\r\n');
      await settled;
      held.status = Number(/^HTTP\/1\.1 (\d{3})/.exec(received)?.[1]) || undefined;
      const body = received.slice(received.indexOf('\r\n\r\n') + 4);
      // A chunked body is one chunk here: its size line, the JSON, then the last chunk.
      held.body = /^transfer-encoding: chunked/im.test(received) ? body.split('\r\n')[1]! : body;
      return held;
    }),
  );
}

/**
 * Waits until the facade has let go of every connection but the one asking (they close on its side a moment after on
 * the client's).
 */
async function untilReleased(stack: Stack): Promise<void> {
  const probe = clientAt(stack, '127.0.0.9');
  try {
    for (;;) {
      const answer = await probe.get(`${stack.app.url}/metrics`).catch(() => undefined);
      const open = Number(
        /^delivery_graph_open_connections\{listener="main"\} (\d+)$/m.exec(answer?.text ?? '')?.[1] ?? NaN,
      );
      if (open <= 1) return;
      await new Promise((resolve) => setTimeout(resolve, 20));
    }
  } finally {
    await probe.agent.close();
  }
}

const countBy = (helds: Held[]) =>
  helds.reduce<Record<string, number>>(
    (counts, held) => ({ ...counts, [String(held.status)]: (counts[String(held.status)] ?? 0) + 1 }),
    {},
  );

/** A merchant (or anyone) on its own address. */
function clientAt(stack: Stack, localAddress: string) {
  const agent = new Agent({ localAddress });
  return {
    agent,
    async gql(query: string, variables: Record<string, unknown>) {
      const response = await request(`${stack.app.url}/graphql`, {
        method: 'POST',
        dispatcher: agent,
        headers: { 'content-type': 'application/json', authorization: `Bearer ${stack.key}` },
        body: JSON.stringify({ query, variables }),
      });
      return { status: response.statusCode, body: (await response.body.json()) as { data?: any; errors?: unknown } };
    },
    async get(url: string) {
      const response = await request(url, { dispatcher: agent, reset: true });
      return { status: response.statusCode, headers: response.headers, text: await response.body.text() };
    },
  };
}

/** A genuine webhook of the upstream's, signed with `privateKey`. */
function signedWebhook(stack: Stack, privateKey: CryptoKey): Promise<string> {
  return new SignJWT({ payload: { uid: randomUUID(), event_name: 'delivery.created' } })
    .setProtectedHeader({ alg: 'RS256' })
    .setIssuer(stack.sandbox.issuer)
    .setIssuedAt()
    .setExpirationTime('5m')
    .sign(privateKey);
}

describe('70 connections from one address with MAX_CONNECTIONS=60 and WEBHOOK_PORT', () => {
  let stack: Stack;
  let privateKey: CryptoKey;
  let held: Held[] = [];
  beforeAll(async () => {
    const pair = await generateKeyPair('RS256', { extractable: true });
    privateKey = pair.privateKey;
    stack = await startStack({
      env: { MAX_CONNECTIONS: '60', WEBHOOK_PORT: '0' },
      sandbox: { privateKeyPem: await exportPKCS8(pair.privateKey) },
    });
  });
  afterEach(() => {
    for (const each of held) each.socket.destroy();
    held = [];
  });
  afterAll(() => stack?.stop());

  it("leave the upstream's webhooks and a merchant on another address answered; the address gets a quarter of the slots, the rest a 429 that says why", async () => {
    held = await holdConnections(stack.app.url, 70, '127.0.0.1');

    // The upstream, on the attacker's address (127.0.0.1), posts to WEBHOOK_PORT on a fresh connection.
    const upstream = clientAt(stack, '127.0.0.1');
    const merchant = clientAt(stack, '127.0.0.2');
    try {
      const before = stack.app.receiver!.counters.accepted;
      const webhook = await request(stack.app.webhookUrl, {
        method: 'POST',
        dispatcher: upstream.agent,
        headers: {
          'content-type': 'application/json',
          authorization: `Bearer ${await signedWebhook(stack, privateKey)}`,
        },
        body: '{}',
      });
      await webhook.body.text();
      expect(webhook.statusCode).toBe(200);
      expect(stack.app.receiver!.counters.accepted).toBe(before + 1);

      // A merchant on 127.0.0.2 books; the sandbox (on 127.0.0.1 too) posts the booking's webhooks to WEBHOOK_PORT.
      const created = await merchant.gql(CREATE, { input: deliveryInput() });
      expect(created.status, JSON.stringify(created.body)).toBe(200);
      const uid = created.body.data.createDelivery.data.uid as string;
      const names = async () =>
        ((await merchant.gql(EVENTS, { uid })).body.data?.delivery?.events.edges ?? []).map(
          (edge: { node: { name: string } }) => edge.node.name,
        );
      while (!(await names()).includes('delivery.created')) await new Promise((resolve) => setTimeout(resolve, 25));

      // The attacking address holds its quarter of the slots, kept alive; the rest of its connections were told why
      // they were refused.
      expect(countBy(held)).toEqual({ 200: 15, 429: 55 });
      expect(held.filter((each) => each.status === 200).every((each) => each.open)).toBe(true);
      const refusal = JSON.parse(held.find((each) => each.status === 429)!.body) as { error: string; message: string };
      expect(refusal.error).toBe('too_many_connections');
      expect(refusal.message).toMatch(/15 connections.*MAX_CONNECTIONS_PER_ADDRESS/);
      const metrics = (await merchant.get(`${stack.app.url}/metrics`)).text;
      expect(metrics).toMatch(/^delivery_graph_connection_refusals_total\{reason="per_address"\} 55$/m);
      expect(metrics).toMatch(/^delivery_graph_open_connections\{listener="main"\} 1[5-7]$/m);
    } finally {
      await upstream.agent.close();
      await merchant.agent.close();
    }
  });
});

describe('a shared port with every slot but those kept for webhooks taken', () => {
  let stack: Stack;
  let privateKey: CryptoKey;
  let held: Held[] = [];
  beforeAll(async () => {
    const pair = await generateKeyPair('RS256', { extractable: true });
    privateKey = pair.privateKey;
    // 60 slots, 8 of them kept for webhooks; four attacking addresses of 13 connections each take the other 52.
    stack = await startStack({
      env: { MAX_CONNECTIONS: '60', WEBHOOK_CONNECTIONS: '8', MAX_CONNECTIONS_PER_ADDRESS: '13' },
      sandbox: { privateKeyPem: await exportPKCS8(pair.privateKey) },
    });
  });
  afterEach(async () => {
    for (const each of held) each.socket.destroy();
    held = [];
    await untilReleased(stack);
  });
  afterAll(() => stack?.stop());

  it('stores a webhook on a kept slot and closes that connection after it; refuses anything else there with a 503 that says why', async () => {
    for (const address of ['127.0.0.3', '127.0.0.4', '127.0.0.5', '127.0.0.6'])
      held.push(...(await holdConnections(stack.app.url, 13, address)));
    expect(countBy(held)).toEqual({ 200: 52 });

    const token = await signedWebhook(stack, privateKey);
    const before = stack.app.receiver!.counters.accepted;
    const upstream = clientAt(stack, '127.0.0.1');
    const merchant = clientAt(stack, '127.0.0.2');
    try {
      const webhook = await request(stack.app.webhookUrl, {
        method: 'POST',
        dispatcher: upstream.agent,
        headers: { 'content-type': 'application/json', authorization: `Bearer ${token}` },
        body: '{}',
      });
      await webhook.body.text();
      expect(webhook.statusCode).toBe(200);
      expect(webhook.headers.connection).toBe('close');
      expect(stack.app.receiver!.counters.accepted).toBe(before + 1);

      const refused = await merchant.get(`${stack.app.url}/health`);
      expect(refused.status).toBe(503);
      expect(refused.headers['retry-after']).toBe('1');
      expect(JSON.parse(refused.text)).toMatchObject({
        error: 'server_busy',
        message: expect.stringMatching(/kept for \/webhooks/),
      });
    } finally {
      await upstream.agent.close();
      await merchant.agent.close();
    }
    // Once the attackers leave, the merchant is served again.
    for (const each of held) each.socket.destroy();
    await untilReleased(stack);
    const again = clientAt(stack, '127.0.0.2');
    try {
      expect((await again.get(`${stack.app.url}/health`)).status).toBe(200);
      const metrics = (await again.get(`${stack.app.url}/metrics`)).text;
      // The merchant's /health, and any probe of untilReleased's that came before the slots were free.
      expect(
        Number(/^delivery_graph_connection_refusals_total\{reason="webhook_slots"\} (\d+)$/m.exec(metrics)?.[1]),
      ).toBeGreaterThanOrEqual(1);
    } finally {
      await again.agent.close();
    }
  });

  it('refuses a connection past every slot with a 503 that names MAX_CONNECTIONS', async () => {
    for (const address of ['127.0.0.3', '127.0.0.4', '127.0.0.5', '127.0.0.6'])
      held.push(...(await holdConnections(stack.app.url, 13, address)));
    // Eight slow webhooks hold the slots kept for webhooks (their heads never end).
    const port = Number(new URL(stack.app.url).port);
    const slow = await Promise.all(
      Array.from({ length: 8 }, async () => {
        const socket = connect({ port, host: '127.0.0.1', localAddress: '127.0.0.7' });
        socket.on('error', () => undefined);
        await once(socket, 'connect');
        socket.write('POST /webhooks HTTP/1.1\r\nhost: upstream\r\n');
        return { socket, status: undefined, body: '', open: true } satisfies Held;
      }),
    );
    held.push(...slow);
    const [refused] = await holdConnections(stack.app.url, 1, '127.0.0.8');
    expect(refused!.status).toBe(503);
    expect(JSON.parse(refused!.body)).toMatchObject({
      error: 'server_busy',
      message: expect.stringMatching(/^All 60 connection slots are taken \(MAX_CONNECTIONS\)/),
    });
    expect(slow.every((each) => !each.socket.destroyed && each.socket.readyState === 'open')).toBe(true);
  });
});

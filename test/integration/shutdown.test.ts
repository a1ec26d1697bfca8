// Graceful stop of the real process: SIGTERM while a slow read, a WebSocket
// subscriber and a stream of webhooks are in flight.
import { spawn, type ChildProcess } from 'node:child_process';
import { rmSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import Database from 'better-sqlite3';
import { exportPKCS8, exportSPKI, generateKeyPair, SignJWT } from 'jose';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startSandbox, type Sandbox } from '@delivery-graph/sandbox';
import { startFaultProxy, type FaultProxy } from '../helpers/fault-proxy.js';
import { deliveryInput, makeDataDir, startStack } from '../helpers/stack.js';
import { waitUntil } from '../helpers/wait.js';
import { collect, wsClient } from '../helpers/ws-client.js';

const root = new URL('../..', import.meta.url).pathname;

describe('SIGTERM', () => {
  let sandbox: Sandbox;
  /** Between the process and the sandbox: holds the slow read for as long as the test wants. */
  let proxy: FaultProxy;
  let child: ChildProcess;
  let url: string;
  let privateKey: CryptoKey;
  const dataDir = makeDataDir();

  beforeAll(async () => {
    const pair = await generateKeyPair('RS256', { extractable: true });
    privateKey = pair.privateKey as CryptoKey;
    sandbox = await startSandbox({ privateKeyPem: await exportPKCS8(pair.privateKey), knobs: { stepMs: 0 } });
    proxy = await startFaultProxy(sandbox.origin);
    const keyFile = path.join(dataDir, 'public.pem');
    writeFileSync(keyFile, await exportSPKI(pair.publicKey));
    child = spawn(process.execPath, ['--import', 'tsx', 'src/main.ts'], {
      cwd: root,
      env: {
        PATH: process.env.PATH ?? '',
        PORT: '0',
        UPSTREAM_URL: proxy.url,
        PLATFORM_ID: sandbox.platformId,
        WEBHOOK_PUBLIC_KEY_FILE: keyFile,
        WEBHOOK_ISSUER: sandbox.issuer,
        DATA_DIR: dataDir,
        LOG_LEVEL: 'silent',
        // Far beyond the test's timeout: a stop that waited out the grace instead of ending when its work is done would
        // never finish here.
        SHUTDOWN_GRACE_MS: '600000',
      },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    url = await new Promise<string>((resolve, reject) => {
      let output = '';
      const timer = setTimeout(() => reject(new Error(output)), 20_000);
      // The banner is on stderr (stdout is a pipe: JSON logs only).
      child.stderr!.on('data', (chunk: Buffer) => {
        output += chunk.toString();
        const match = /serving on (http:\/\/\S+)/.exec(output);
        if (match) {
          clearTimeout(timer);
          resolve(match[1]!);
        }
      });
    });
  });

  afterAll(async () => {
    if (child.exitCode === null) child.kill('SIGKILL');
    await proxy.close();
    await sandbox.stop();
    rmSync(dataDir, { recursive: true, force: true });
  });

  it('finishes in-flight work, closes WebSockets with 1001, keeps every acknowledged event, and exits 0', async () => {
    const key = sandbox.merchants[0]!.key;
    const gql = (query: string, variables?: Record<string, unknown>) =>
      fetch(`${url}/graphql`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', authorization: `Bearer ${key}` },
        body: JSON.stringify({ query, variables }),
      });
    const booked = await (
      await gql(
        'mutation($input: DeliveryInput!) { createDelivery(input: $input) { ... on MutationCreateDeliverySuccess { data { uid } } } }',
        { input: deliveryInput() },
      )
    ).json();
    const uid = (booked as any).data.createDelivery.data.uid as string;

    let closeCode = 0;
    const client = wsClient(url, key, { onClose: (code) => (closeCode = code) });
    const subscription = collect(client, 'subscription($uid: ID!) { deliveryUpdated(uid: $uid) { status } }', { uid });
    await subscription.waitFor(1);

    // A read held at the upstream until the stop is under way (the process closed its WebSockets).
    let readArrived = false;
    proxy.fault = async (req) => {
      if (req.method !== 'GET' || !req.url?.endsWith(`/deliveries/${uid}`)) return false;
      readArrived = true;
      await subscription.done;
      return false;
    };
    const slowRead = gql('query($uid: ID!) { delivery(uid: $uid) { uid status } }', { uid });
    await waitUntil(() => readArrived, 'the read to reach the upstream');

    // A stream of webhooks, some of which race the stop.
    const acknowledged: string[] = [];
    const sending = (async () => {
      for (let i = 0; i < 400; i += 8) {
        await Promise.all(
          Array.from({ length: 8 }, async (_, j) => {
            const event = {
              uid,
              event_name: 'location.pickup_enroute',
              driver_location: { lat: i + j, lng: 0 },
              n: i + j,
            };
            const token = await new SignJWT({ payload: event })
              .setProtectedHeader({ alg: 'RS256' })
              .setIssuer(sandbox.issuer)
              .setExpirationTime('5m')
              .sign(privateKey);
            try {
              const response = await fetch(`${url}/webhooks`, {
                method: 'POST',
                headers: { authorization: `Bearer ${token}` },
                body: JSON.stringify(event),
              });
              if (response.status === 200) acknowledged.push(String(i + j));
            } catch {
              // refused once the server stopped listening: the upstream would retry
            }
          }),
        );
      }
    })();
    // Some are acknowledged before the stop, others race it.
    await waitUntil(() => acknowledged.length > 0, 'a first webhook to be acknowledged');

    const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));
    child.kill('SIGTERM');

    const read = await slowRead;
    expect(read.status).toBe(200);
    expect(((await read.json()) as any).data.delivery.uid).toBe(uid);
    expect(await exited).toBe(0);
    await subscription.done;
    expect(closeCode).toBe(1001);
    await sending;
    await expect(fetch(`${url}/health`)).rejects.toThrow();

    const db = new Database(path.join(dataDir, 'delivery-graph.sqlite'), { readonly: true });
    const stored = new Set(
      (
        db.prepare("SELECT payload FROM events WHERE name = 'location.pickup_enroute'").all() as Array<{
          payload: string;
        }>
      ).map((row) => String(JSON.parse(row.payload).n)),
    );
    db.close();
    expect(acknowledged.length).toBeGreaterThan(0);
    for (const n of acknowledged) expect(stored.has(n), `acknowledged event ${n} missing`).toBe(true);
    await client.dispose();
  });
});

describe('a graceful stop while webhooks keep coming', () => {
  it('does not wait out SHUTDOWN_GRACE_MS: keep-alive connections close after their answer', async () => {
    // A grace period far beyond the test's timeout: a stop that waited for it would never finish here.
    const stack = await startStack({ env: { SHUTDOWN_GRACE_MS: '600000' }, sandbox: { knobs: { stepMs: 20 } } });
    try {
      const CREATE = 'mutation($input: DeliveryInput!) { createDelivery(input: $input) { __typename } }';
      for (let i = 0; i < 5; i += 1) await stack.gql(CREATE, { input: deliveryInput() });
      // The sandbox now posts a webhook every few milliseconds over its keep-alive connections.
      await waitUntil(() => stack.sandbox.webhookStats().delivered >= 10, 'ten webhooks delivered');
      await stack.app.stop();
    } finally {
      await stack.stop();
    }
  });

  it('does not wait out SHUTDOWN_GRACE_MS for an answer that was under way when the stop began', async () => {
    // Begun before the stop, its answer carries no `connection: close`: its keep-alive connection must still end once
    // the answer is sent, like the webhook the sandbox posts just as an operator restarts the facade.
    const stack = await startStack({ env: { SHUTDOWN_GRACE_MS: '600000' }, faultProxy: true });
    try {
      let release!: () => void;
      const released = new Promise<void>((resolve) => (release = resolve));
      let reached!: () => void;
      const atUpstream = new Promise<void>((resolve) => (reached = resolve));
      stack.proxy!.fault = async () => {
        reached();
        await released;
        return false;
      };
      const read = stack.gql('{ availability { group available } }');
      await atUpstream;
      const stopped = stack.app.stop();
      release();
      expect((await read).data.availability).toHaveLength(2);
      await stopped;
    } finally {
      await stack.stop();
    }
  });
});

// `npm start` stopped and started again on the same DATA_DIR, as an operator
// restarts it: the embedded sandbox keeps its world in DATA_DIR/sandbox beside
// the facade's events, owners and idempotency keys, so a delivery booked before
// the restart is read, followed to its end and canceled after it, through
// webhooks the restarted facade still verifies.
import { spawn, type ChildProcess } from 'node:child_process';
import { rmSync } from 'node:fs';
import path from 'node:path';
import { expect, it } from 'vitest';
import { freePort } from '../../scripts/sentinel-set.js';
import { deliveryInput, makeDataDir } from '../helpers/stack.js';
import { collect, wsClient } from '../helpers/ws-client.js';

const root = new URL('../..', import.meta.url).pathname;
const KEY = 'sk_test_demo_merchant';
const CREATE =
  'mutation($input: DeliveryInput!) { createDelivery(input: $input) { ... on MutationCreateDeliverySuccess { data { uid } } } }';
const READ = 'query($uid: ID!) { delivery(uid: $uid) { uid status } }';
const CANCEL =
  'mutation($uid: ID!) { cancelDelivery(uid: $uid) { __typename ... on MutationCancelDeliverySuccess { data { uid status } } ... on Error { code message } } }';

function start(env: Record<string, string>): { child: ChildProcess; url: Promise<string> } {
  const child = spawn(process.execPath, ['--import', 'tsx', 'src/main.ts'], {
    cwd: root,
    env: { PATH: process.env.PATH ?? '', LOG_LEVEL: 'silent', ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  const url = new Promise<string>((resolve, reject) => {
    let output = '';
    const timer = setTimeout(() => reject(new Error(`not serving within 30 s:\n${output}`)), 30_000);
    const onData = (chunk: Buffer) => {
      output += chunk.toString();
      const served = /serving on (http:\/\/\S+)/.exec(output);
      if (served) {
        clearTimeout(timer);
        resolve(served[1]!);
      }
    };
    child.stdout!.on('data', onData);
    child.stderr!.on('data', onData);
    child.once('exit', (code) => reject(new Error(`exited with ${code}:\n${output}`)));
  });
  return { child, url };
}

const stopped = (child: ChildProcess) =>
  new Promise<number | null>((resolve) => {
    child.once('exit', (code) => resolve(code));
    child.kill('SIGTERM');
  });

async function graphql(url: string, query: string, variables: Record<string, unknown>): Promise<any> {
  const response = await fetch(`${url}/graphql`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', authorization: `Bearer ${KEY}` },
    body: JSON.stringify({ query, variables }),
  });
  return response.json();
}

it('a delivery booked before a restart is read, followed to its end and canceled after it, its webhooks verified', async () => {
  const dataDir = makeDataDir();
  // The sandbox on a port of its own that both lives share, so the test can move its deliveries by hand.
  const sandbox = `http://127.0.0.1:${await freePort()}`;
  const env = {
    PORT: '0',
    SANDBOX_PORT: new URL(sandbox).port,
    SANDBOX_STEP_MS: '0',
    SANDBOX_RETURN_RATE: '0',
    DATA_DIR: dataDir,
  };
  const advance = async (uid: string) =>
    expect((await fetch(`${sandbox}/sandbox/deliveries/${uid}/advance`, { method: 'POST' })).status).toBe(200);
  const history = async (uid: string) =>
    (await (await fetch(`${sandbox}/sandbox/deliveries/${uid}/history`)).json()) as {
      events: { event_name: string; fate: string }[];
    };
  const children: ChildProcess[] = [];
  try {
    const first = start(env);
    children.push(first.child);
    const before = await first.url;
    const followed = (await graphql(before, CREATE, { input: deliveryInput() })).data.createDelivery.data.uid as string;
    const canceled = (await graphql(before, CREATE, { input: deliveryInput() })).data.createDelivery.data.uid as string;
    const watcher = wsClient(before, KEY);
    const seen = collect(watcher, 'subscription($uid: ID!) { deliveryUpdated(uid: $uid) { status } }', {
      uid: followed,
    });
    await seen.waitFor(1);
    for (let step = 0; step < 3; step++) await advance(followed);
    // Through its webhooks: the first life has stored PICKUP_ARRIVED.
    await seen.waitForItem((item) => item.deliveryUpdated.status === 'PICKUP_ARRIVED');
    await watcher.dispose();
    expect((await graphql(before, READ, { uid: followed })).data.delivery.status).toBe('PICKUP_ARRIVED');
    const signingKey = await (await fetch(`${sandbox}/sandbox/public-key.pem`)).text();
    expect(await stopped(first.child)).toBe(0);

    const second = start(env);
    children.push(second.child);
    const after = await second.url;
    // The same world, signing with the same key.
    expect(await (await fetch(`${sandbox}/sandbox/public-key.pem`)).text()).toBe(signingKey);
    expect((await graphql(after, READ, { uid: followed })).data.delivery).toEqual({
      uid: followed,
      status: 'PICKUP_ARRIVED',
    });

    const client = wsClient(after, KEY);
    const updates = collect(client, 'subscription($uid: ID!) { deliveryUpdated(uid: $uid) { status } }', {
      uid: followed,
    });
    await updates.waitFor(1);
    // The rest of its life: each milestone a webhook the restarted facade must verify, or the subscription never ends.
    for (let step = 0; step < 4; step++) await advance(followed);
    await updates.done;
    await client.dispose();
    const statuses = updates.items.map((item) => item.deliveryUpdated.status);
    expect(statuses[0]).toBe('PICKUP_ARRIVED');
    expect(statuses).toContain('PICKUP_COMPLETE');
    expect(statuses.at(-1)).toBe('DROPOFF_COMPLETE');
    const events = (await history(followed)).events;
    expect(events.map((event) => event.event_name)).toContain('delivery.dropoff_complete');
    expect(events.filter((event) => event.fate !== 'delivered')).toEqual([]);

    expect((await graphql(after, CANCEL, { uid: canceled })).data.cancelDelivery).toEqual({
      __typename: 'MutationCancelDeliverySuccess',
      data: { uid: canceled, status: 'CANCELED' },
    });
    expect(await stopped(second.child)).toBe(0);
  } finally {
    for (const child of children) if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
    rmSync(dataDir, { recursive: true, force: true });
  }
}, 90_000);

it('stops at start with one line when another process holds its sandbox world (a standalone sandbox on DATA_DIR/sandbox)', async () => {
  const dataDir = makeDataDir();
  const standalone = spawn(
    process.execPath,
    [
      '--import',
      'tsx',
      'packages/sandbox/src/main.ts',
      '--port',
      '0',
      '--data-dir',
      path.join(dataDir, 'sandbox'),
      '--public-key-file',
      path.join(dataDir, 'public.pem'),
    ],
    {
      cwd: root,
      env: { PATH: process.env.PATH ?? '' },
      stdio: ['ignore', 'pipe', 'inherit'],
    },
  );
  try {
    await new Promise<void>((resolve, reject) => {
      let output = '';
      standalone.stdout!.on('data', (chunk: Buffer) => {
        output += chunk.toString();
        if (output.includes('control:')) resolve();
      });
      standalone.once('exit', (code) => reject(new Error(`the standalone sandbox exited with ${code}:\n${output}`)));
    });
    const facade = start({ PORT: '0', SANDBOX_PORT: '0', DATA_DIR: dataDir });
    let stderr = '';
    facade.child.stderr!.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
    facade.url.catch(() => undefined);
    const code = await new Promise<number | null>((resolve) => facade.child.once('exit', resolve));
    expect(code).toBe(1);
    expect(stderr.trim().split('\n')).toEqual([
      `delivery-graph: the sandbox world in ${path.join(dataDir, 'sandbox')} is in use by another process (pid ${standalone.pid}): stop that one, or start this one on another folder`,
    ]);
  } finally {
    standalone.kill('SIGKILL');
    rmSync(dataDir, { recursive: true, force: true });
  }
}, 60_000);

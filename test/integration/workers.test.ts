// WORKERS=2 on one Redis: two processes serve the one port (node:cluster). What
// one worker receives (a webhook, a booking's idempotency claim) the other sees;
// a subscriber on either worker gets every milestone; SIGTERM stops them all.
import { spawn, type ChildProcess } from 'node:child_process';
import { rmSync } from 'node:fs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { redisAvailable, startRedisServer, type RedisServer } from '../helpers/redis.js';
import { deliveryInput, makeDataDir, TEST_CLIENT_TOKEN_SECRET } from '../helpers/stack.js';
import { collect, wsClient } from '../helpers/ws-client.js';

const root = new URL('../..', import.meta.url).pathname;
const KEY = 'sk_test_demo_merchant';
const CREATE =
  'mutation($input: DeliveryInput!, $key: String) { createDelivery(input: $input, idempotencyKey: $key) { __typename ... on MutationCreateDeliverySuccess { data { uid } } } }';

describe.skipIf(!redisAvailable('workers.test.ts'))('WORKERS=2 on one Redis', () => {
  let redis: RedisServer;
  let primary: ChildProcess;
  let url: string;
  let stderr = '';
  let stdout = '';
  const dataDir = makeDataDir();

  beforeAll(async () => {
    redis = await startRedisServer();
    primary = spawn(process.execPath, ['--import', 'tsx', 'src/main.ts'], {
      cwd: root,
      // info: one line per GraphQL request, written by whichever worker served it (webhooks log at debug outside
      // production).
      env: {
        PATH: process.env.PATH ?? '',
        WORKERS: '2',
        REDIS_URL: redis.url,
        CLIENT_TOKEN_SECRET: TEST_CLIENT_TOKEN_SECRET,
        PORT: '0',
        SANDBOX_PORT: '0',
        SANDBOX_STEP_MS: '100',
        SANDBOX_RETURN_RATE: '0',
        DATA_DIR: dataDir,
        LOG_LEVEL: 'info',
        LOG_FORMAT: 'json',
      },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    primary.stdout!.on('data', (chunk: Buffer) => (stdout += chunk.toString()));
    url = await new Promise<string>((resolve, reject) => {
      let output = '';
      primary.once('exit', (code) => reject(new Error(`the primary exited with ${code}:\n${output}`)));
      const onData = (chunk: Buffer) => {
        output += chunk.toString();
        const served = /serving on (http:\/\/\S+)/.exec(output);
        if (served) resolve(served[1]!);
      };
      primary.stdout!.on('data', onData);
      primary.stderr!.on('data', onData);
    });
    primary.stderr!.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
  }, 60_000);

  afterAll(async () => {
    if (primary?.exitCode === null) primary.kill('SIGKILL');
    await redis?.stop();
    rmSync(dataDir, { recursive: true, force: true });
  });

  /** One request on a connection of its own, so the cluster may hand it to either worker. */
  const gql = async (query: string, variables: Record<string, unknown>) => {
    const response = await fetch(`${url}/graphql`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', authorization: `Bearer ${KEY}`, connection: 'close' },
      body: JSON.stringify({ query, variables }),
    });
    return (await response.json()) as { data: any; errors?: unknown };
  };

  it('is served by two worker processes', async () => {
    const workers = new Set<number>();
    // The cluster hands fresh connections to the workers in turn.
    for (let i = 0; i < 20 && workers.size < 2; i += 1) {
      const health = (await (await fetch(`${url}/health`, { headers: { connection: 'close' } })).json()) as {
        worker?: number;
      };
      workers.add(health.worker!);
    }
    expect([...workers].sort()).toEqual([1, 2]);
  });

  it('books once for one idempotency key sent to both workers at once', async () => {
    const input = deliveryInput();
    const key = `workers-${Date.now()}`;
    const answers = await Promise.all(Array.from({ length: 6 }, () => gql(CREATE, { input, key })));
    const uids = new Set(answers.map((answer) => answer.data.createDelivery.data.uid));
    expect(uids.size).toBe(1);
  });

  it('delivers every milestone to a subscriber whichever worker received each webhook', async () => {
    const booked = await gql(CREATE, { input: deliveryInput({ mode: 'NOW' }) });
    const uid = booked.data.createDelivery.data.uid as string;
    const client = wsClient(url, KEY);
    const sub = collect(client, 'subscription($uid: ID!) { deliveryUpdated(uid: $uid) { status } }', { uid });
    const items = await sub.waitForItem((item) => item.deliveryUpdated.status === 'DROPOFF_COMPLETE', 30_000);
    const statuses = sub.items.map((item) => item.deliveryUpdated.status);
    expect(statuses.at(-1)).toBe('DROPOFF_COMPLETE');
    expect(items).toBeDefined();
    await client.dispose();
  });

  it('stops every worker on SIGTERM to the primary, and exits 0', async () => {
    const exited = new Promise<number | null>((resolve) => primary.once('exit', (code) => resolve(code)));
    primary.kill('SIGTERM');
    expect(await exited).toBe(0);
    await expect(fetch(`${url}/health`)).rejects.toThrow();
  });

  it('printed no warning (a Node warning goes to the stderr of the process that has it)', () => {
    expect(stderr).not.toMatch(/warning/i);
  });

  it("wrote JSON lines only on stdout, each with its process, and each worker's with its worker", () => {
    const lines = stdout
      .split('\n')
      .filter(Boolean)
      .map((line) => JSON.parse(line) as { pid: number; worker?: number; msg: string });
    expect(lines.every((line) => Number.isInteger(line.pid))).toBe(true);
    // The primary's own lines (where it serves, the stop) carry no worker; every request line names the worker that
    // served it.
    expect(lines.filter((line) => line.pid === primary.pid).every((line) => line.worker === undefined)).toBe(true);
    const requests = lines.filter((line) => line.msg === 'request');
    expect(new Set(requests.map((line) => line.worker))).toEqual(new Set([1, 2]));
    // One process per worker, neither the primary.
    const pidOf = new Map(requests.map((line) => [line.worker, line.pid]));
    expect(requests.every((line) => pidOf.get(line.worker) === line.pid)).toBe(true);
    expect(new Set([primary.pid, ...pidOf.values()]).size).toBe(3);
  });
});

describe.skipIf(!redisAvailable('workers.test.ts'))(
  'WORKERS=2 with WEBHOOK_PORT and METRICS_PORT, in production',
  () => {
    let redis: RedisServer;
    let primary: ChildProcess;
    let output = '';
    const dataDir = makeDataDir();

    beforeAll(async () => {
      redis = await startRedisServer();
      primary = spawn(process.execPath, ['--import', 'tsx', 'src/main.ts'], {
        cwd: root,
        env: {
          PATH: process.env.PATH ?? '',
          NODE_ENV: 'production',
          UPSTREAM_URL: 'sandbox',
          WORKERS: '2',
          REDIS_URL: redis.url,
          CLIENT_TOKEN_SECRET: TEST_CLIENT_TOKEN_SECRET,
          PORT: '0',
          WEBHOOK_PORT: '0',
          METRICS_PORT: '0',
          SANDBOX_PORT: '0',
          SANDBOX_STEP_MS: '100',
          SANDBOX_RETURN_RATE: '0',
          DATA_DIR: dataDir,
          LOG_LEVEL: 'warn',
        },
        stdio: ['ignore', 'pipe', 'pipe'],
      });
      await new Promise<void>((resolve, reject) => {
        primary.once('exit', (code) => reject(new Error(`the primary exited with ${code}:\n${output}`)));
        const onData = (chunk: Buffer) => {
          output += chunk.toString();
          if (/^ {2}metrics /m.test(output) && /serving on/.test(output)) resolve();
        };
        primary.stdout!.on('data', onData);
        primary.stderr!.on('data', onData);
      });
    }, 60_000);

    afterAll(async () => {
      if (primary?.exitCode === null) primary.kill('SIGKILL');
      await redis?.stop();
      rmSync(dataDir, { recursive: true, force: true });
    });

    it('prints the webhook and metrics listeners, takes the sandbox webhooks on the first and serves /metrics on the second alone', async () => {
      const url = /serving on (http:\/\/\S+)/.exec(output)![1]!;
      const webhooks = /^ {2}webhooks +(http:\/\/\S+)/m.exec(output)![1]!;
      const metrics = /^ {2}metrics +(http:\/\/\S+)/m.exec(output)![1]!;
      expect(new Set([new URL(url).port, new URL(webhooks).port, new URL(metrics).port]).size).toBe(3);
      const booked = await fetch(`${url}/graphql`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', authorization: `Bearer ${KEY}` },
        body: JSON.stringify({ query: CREATE, variables: { input: deliveryInput({ mode: 'NOW' }) } }),
      });
      const uid = ((await booked.json()) as any).data.createDelivery.data.uid as string;
      const client = wsClient(url, KEY);
      const sub = collect(client, 'subscription($uid: ID!) { deliveryUpdated(uid: $uid) { status } }', { uid });
      await sub.waitForItem((item) => item.deliveryUpdated.status === 'DROPOFF_COMPLETE', 30_000);
      await client.dispose();
      expect((await fetch(`${url}/metrics`)).status).toBe(404);
      expect((await fetch(`${url}/webhooks`, { method: 'POST', body: '{}' })).status).toBe(404);
      const scrape = await fetch(metrics, { headers: { connection: 'close' } });
      expect(scrape.status).toBe(200);
      // Whichever worker answers (the sender may have posted every webhook to the other one).
      expect(await scrape.text()).toMatch(/^# TYPE delivery_graph_webhooks_total counter$/m);
    });
  },
);

// `npm start` as a newcomer runs it: the real entry point in a child process,
// against the embedded sandbox, then stopped with SIGTERM.
import { spawn, type ChildProcess } from 'node:child_process';
import { rmSync } from 'node:fs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { deliveryInput, makeDataDir } from '../helpers/stack.js';
import { collect, wsClient } from '../helpers/ws-client.js';

const root = new URL('../..', import.meta.url).pathname;

function run(env: Record<string, string>): ChildProcess {
  // The preload answers SIGUSR2 with the packages loaded (test/fixtures/loaded-packages.cjs).
  return spawn(
    process.execPath,
    ['--require', './test/fixtures/loaded-packages.cjs', '--import', 'tsx', 'src/main.ts'],
    {
      cwd: root,
      env: { PATH: process.env.PATH ?? '', LOG_LEVEL: 'silent', ...env },
      stdio: ['ignore', 'pipe', 'pipe'],
    },
  );
}

function waitFor(child: ChildProcess, pattern: RegExp, timeoutMs = 15_000): Promise<RegExpMatchArray> {
  return new Promise((resolve, reject) => {
    let output = '';
    const timer = setTimeout(() => reject(new Error(`no ${pattern} in:\n${output}`)), timeoutMs);
    const onData = (chunk: Buffer) => {
      output += chunk.toString();
      const match = pattern.exec(output);
      if (match) {
        clearTimeout(timer);
        resolve(match);
      }
    };
    child.stdout!.on('data', onData);
    child.stderr!.on('data', onData);
  });
}

const exited = (child: ChildProcess) =>
  new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));

describe('npm start against the embedded sandbox', () => {
  const dataDir = makeDataDir();
  let child: ChildProcess;
  let url: string;
  let key: string;
  let bannerText = '';

  beforeAll(async () => {
    // Steps long enough that the subscriber below is live before the delivery is picked up, even on a busy machine
    // (it confirms its key with one upstream read as it starts; a later start begins from the read's state).
    child = run({ PORT: '0', SANDBOX_PORT: '0', SANDBOX_STEP_MS: '250', SANDBOX_RETURN_RATE: '0', DATA_DIR: dataDir });
    // stdout is a pipe: JSON logs there, the banner on stderr.
    child.stderr!.on('data', (chunk: Buffer) => (bannerText += chunk.toString()));
    const [served, merchant] = await Promise.all([
      waitFor(child, /serving on (http:\/\/\S+)/),
      waitFor(child, /merchant key: (\S+)/),
      waitFor(child, /Milestones come every/),
    ]);
    url = served[1]!;
    key = merchant[1]!;
  });
  afterAll(() => {
    if (child.exitCode === null) child.kill('SIGKILL');
    rmSync(dataDir, { recursive: true, force: true });
  });

  it('loads no Redis client on SQLite: the Redis store and bus modules come only with REDIS_URL', async () => {
    const listed = waitFor(child, /loaded packages: (.*)/);
    child.kill('SIGUSR2');
    const packages = (await listed)[1]!.split(' ');
    expect(packages).toContain('better-sqlite3');
    expect(packages.filter((name) => /redis/.test(name))).toEqual([]);
  });

  it('prints where the page, GraphiQL, the webhooks, health and metrics are, and each answers there', async () => {
    const at = (label: string) =>
      new RegExp(`^  ${label.replace(/[+/]/g, '\\$&')}\\s+(http://\\S+)`, 'm').exec(bannerText)?.[1];
    const page = at('tracking page');
    const graphiql = at('GraphQL + GraphiQL');
    const webhooks = at('webhooks');
    const health = at('health / ready');
    const metrics = at('metrics');
    expect([page, graphiql, webhooks, health, metrics]).toEqual([
      `${url}/`,
      `${url}/graphql`,
      `${url}/webhooks`,
      `${url}/health`,
      `${url}/metrics`,
    ]);
    expect(bannerText).toContain(`open ${url}/ and press "Book a sandbox delivery"`);
    // Which tracking page is which: ours at /#uid=, a delivery's trackingUrl on the sandbox's own port.
    expect(bannerText).toContain(
      `${url}/#uid=<uid> follows a delivery live; a delivery's trackingUrl is the upstream's own page`,
    );
    expect(bannerText).toMatch(
      /trackingUrl is the sandbox's own page on 127\.0\.0\.1:\d+, not this service's tracking page/,
    );

    const pageResponse = await fetch(page!);
    expect(pageResponse.status).toBe(200);
    expect(await pageResponse.text()).toContain('<meta name="dg-sandbox-key" content="sk_test_demo_merchant">');
    const graphiqlResponse = await fetch(graphiql!, { headers: { accept: 'text/html' } });
    expect(await graphiqlResponse.text()).toContain('GraphiQL');
    expect((await fetch(webhooks!, { method: 'POST', body: 'not a token' })).status).toBe(401);
    expect((await fetch(health!)).status).toBe(200);
    expect(await (await fetch(metrics!)).text()).toContain('# TYPE');
  });

  it('serves /health and /ready', async () => {
    expect((await fetch(`${url}/health`)).status).toBe(200);
    expect((await fetch(`${url}/ready`)).status).toBe(200);
  });

  it('answers availability of both groups with the printed key', async () => {
    const response = await fetch(`${url}/graphql`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', authorization: `Bearer ${key}` },
      body: JSON.stringify({ query: '{ availability { group available } }' }),
    });
    expect(await response.json()).toEqual({
      data: {
        availability: [
          { group: 'PLATFORM', available: true },
          { group: 'PARTNER', available: true },
        ],
      },
    });
  });

  it('moves a booked delivery to DROPOFF_COMPLETE through signed webhooks, seen by a graphql-ws subscriber', async () => {
    const response = await fetch(`${url}/graphql`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', authorization: `Bearer ${key}` },
      body: JSON.stringify({
        query:
          'mutation($input: DeliveryInput!) { createDelivery(input: $input) { ... on MutationCreateDeliverySuccess { data { uid } } } }',
        variables: { input: deliveryInput() },
      }),
    });
    const uid = ((await response.json()) as any).data.createDelivery.data.uid;
    const client = wsClient(url, key);
    const updates = collect(client, 'subscription($uid: ID!) { deliveryUpdated(uid: $uid) { status name } }', { uid });
    const positions = collect(
      client,
      'subscription($uid: ID!) { courierLocation(uid: $uid) { location { lat lng } } }',
      { uid },
    );
    await updates.done;
    await positions.done;
    const statuses = updates.items.map((item) => item.deliveryUpdated.status);
    expect(statuses.at(-1)).toBe('DROPOFF_COMPLETE');
    expect(statuses).toContain('PICKUP_COMPLETE');
    expect(updates.items.slice(1).every((item) => item.deliveryUpdated.name.startsWith('delivery.'))).toBe(true);
    expect(positions.items.length).toBeGreaterThan(3);
    await client.dispose();
  });

  it('stops cleanly on SIGTERM', async () => {
    const done = exited(child);
    child.kill('SIGTERM');
    expect(await done).toBe(0);
  });
});

describe('npm start with default logging, stdout not a terminal', () => {
  /**
   * Starts with LOG_LEVEL and LOG_FORMAT unset, books a delivery and follows it to the end; returns what the process
   * wrote.
   */
  async function bookedDeliveryLife(env: Record<string, string>): Promise<{ stdout: string; stderr: string }> {
    const dataDir = makeDataDir();
    const child = run({
      PORT: '0',
      SANDBOX_PORT: '0',
      SANDBOX_STEP_MS: '100',
      SANDBOX_RETURN_RATE: '0',
      DATA_DIR: dataDir,
      LOG_LEVEL: '',
      ...env,
    });
    let stdout = '';
    let stderr = '';
    child.stdout!.on('data', (chunk: Buffer) => (stdout += chunk.toString()));
    child.stderr!.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
    try {
      const [[, url], [, key]] = await Promise.all([
        waitFor(child, /serving on (http:\/\/\S+)/),
        waitFor(child, /merchant key: (\S+)/),
        waitFor(child, /Milestones come every/),
      ]);
      const response = await fetch(`${url}/graphql`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', authorization: `Bearer ${key}` },
        body: JSON.stringify({
          query:
            'mutation($input: DeliveryInput!) { createDelivery(input: $input) { ... on MutationCreateDeliverySuccess { data { uid } } } }',
          variables: { input: deliveryInput() },
        }),
      });
      const uid = ((await response.json()) as any).data.createDelivery.data.uid;
      const client = wsClient(url!, key!);
      const updates = collect(client, 'subscription($uid: ID!) { deliveryUpdated(uid: $uid) { status } }', { uid });
      await updates.done;
      await client.dispose();
      expect(updates.items.at(-1).deliveryUpdated.status).toBe('DROPOFF_COMPLETE');
      const done = exited(child);
      child.kill('SIGTERM');
      expect(await done).toBe(0);
      return { stdout, stderr };
    } finally {
      if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
      rmSync(dataDir, { recursive: true, force: true });
    }
  }

  /** Every stdout line, each parsed as JSON: nothing else is written there (the banner goes to stderr). */
  const logLines = (stdout: string) => stdout.split('\n').filter(Boolean);

  it('in development writes JSON lines and no line per webhook at info, so the banner stays in view', async () => {
    const { stdout, stderr } = await bookedDeliveryLife({});
    const lines = logLines(stdout).map((line) => JSON.parse(line) as { level: number; msg: string; path?: string });
    expect(lines.filter((line) => line.msg === 'request' && line.path === '/graphql')).toHaveLength(1);
    expect(lines.filter((line) => line.path === '/webhooks')).toEqual([]);
    // Where it serves, the mutation's line, the socket's upgrade, its operation and its close, and the stop with its last
    // line: a handful, however many webhooks came.
    expect(lines.length).toBeLessThanOrEqual(7);
    expect(lines.at(-1)).toMatchObject({ msg: 'stopped' });
    expect(stderr).not.toMatch(/warning/i);
  });

  it('in production logs each webhook at info, one JSON line each', async () => {
    const { stdout, stderr } = await bookedDeliveryLife({ NODE_ENV: 'production', UPSTREAM_URL: 'sandbox' });
    const lines = logLines(stdout).map(
      (line) => JSON.parse(line) as { level: number; msg: string; path?: string; status?: number },
    );
    const webhooks = lines.filter((line) => line.msg === 'request' && line.path === '/webhooks');
    // Created, the milestones to drop-off, and the courier's positions between them.
    expect(webhooks.length).toBeGreaterThan(5);
    expect(webhooks.every((line) => line.level === 30 && line.status === 200)).toBe(true);
    expect(stderr).not.toMatch(/warning/i);
  });
});

describe('stdout with JSON logs', () => {
  it('carries JSON lines only, each with its pid; the banner goes to stderr; a misspelled setting is named with the closest one', async () => {
    const dataDir = makeDataDir();
    // LOG_FORMAT=json as a collector reads it; REDIS_ULR is REDIS_URL misspelled (ignored, but named).
    const child = run({
      PORT: '0',
      SANDBOX_PORT: '0',
      DATA_DIR: dataDir,
      LOG_LEVEL: 'info',
      LOG_FORMAT: 'json',
      REDIS_ULR: 'redis://127.0.0.1:6379',
    });
    let stdout = '';
    let stderr = '';
    child.stdout!.on('data', (chunk: Buffer) => (stdout += chunk.toString()));
    child.stderr!.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
    try {
      const [[, url]] = await Promise.all([
        waitFor(child, /serving on (http:\/\/\S+)/),
        waitFor(child, /Milestones come every/),
      ]);
      await fetch(`${url}/graphql`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: '{"query":"{ __typename }"}',
      });
      const done = exited(child);
      child.kill('SIGTERM');
      expect(await done).toBe(0);
      const lines = stdout.split('\n').filter(Boolean);
      const parsed = lines.map((line) => {
        try {
          return JSON.parse(line) as Record<string, unknown>;
        } catch {
          throw new Error(`a stdout line is not JSON: ${line}`);
        }
      });
      expect(parsed.every((line) => line.pid === child.pid)).toBe(true);
      // The facts of the banner, for a machine; the banner itself, for a person.
      expect(parsed).toContainEqual(expect.objectContaining({ msg: 'serving', url, sandbox: true }));
      expect(parsed).toContainEqual(expect.objectContaining({ msg: 'request', path: '/graphql' }));
      expect(stdout).not.toContain('serving on');
      expect(stderr).toContain(`delivery-graph is serving on ${url}`);
      expect(parsed).toContainEqual(
        expect.objectContaining({
          level: 40,
          variable: 'REDIS_ULR',
          closest: 'REDIS_URL',
          msg: 'REDIS_ULR is not a setting of delivery-graph and is ignored; did you mean REDIS_URL?',
        }),
      );
    } finally {
      if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
      rmSync(dataDir, { recursive: true, force: true });
    }
  }, 60_000);
});

describe('a production start', () => {
  it('without UPSTREAM_URL stops with one line naming it, and how to ask for the simulator', async () => {
    const dataDir = makeDataDir();
    const child = run({ NODE_ENV: 'production', PORT: '0', SANDBOX_PORT: '0', DATA_DIR: dataDir });
    try {
      let stderr = '';
      let stdout = '';
      child.stderr!.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
      child.stdout!.on('data', (chunk: Buffer) => (stdout += chunk.toString()));
      expect(await exited(child)).toBe(1);
      expect(stderr.trim().split('\n')).toEqual([
        "delivery-graph: bad configuration: UPSTREAM_URL: required in production (NODE_ENV=production): the upstream's base URL ending in /api/v1, or UPSTREAM_URL=sandbox to run the embedded simulator on purpose",
      ]);
      expect(stdout).toBe('');
    } finally {
      // A start that did not stop (it served the simulator) is not left running.
      if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
      rmSync(dataDir, { recursive: true, force: true });
    }
  });

  it('with UPSTREAM_URL=sandbox runs the simulator, says so in the banner and in a warning, and shows only what production serves', async () => {
    const dataDir = makeDataDir();
    const child = run({
      NODE_ENV: 'production',
      UPSTREAM_URL: 'sandbox',
      PORT: '0',
      SANDBOX_PORT: '0',
      DATA_DIR: dataDir,
      LOG_LEVEL: 'warn',
    });
    let stderr = '';
    let stdout = '';
    child.stderr!.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
    child.stdout!.on('data', (chunk: Buffer) => (stdout += chunk.toString()));
    try {
      const [[, url]] = await Promise.all([
        waitFor(child, /serving on (http:\/\/\S+)/),
        waitFor(child, /Milestones come every/),
      ]);
      expect((await fetch(`${url}/ready`)).status).toBe(200);
      expect(stderr).toContain('a simulator: UPSTREAM_URL=sandbox asked for it, and nothing is really booked');
      // GraphiQL and /metrics are off in production: the banner names neither.
      expect(stderr).not.toMatch(/GraphiQL/);
      expect(stderr).toMatch(/^ {2}GraphQL {13}http:\/\/\S+\/graphql/m);
      expect(stderr).not.toMatch(/^ {2}metrics /m);
      expect(stderr).toContain(`then over graphql-ws at ${url!.replace('http', 'ws')}/graphql run`);
      const warnings = stdout
        .split('\n')
        .filter(Boolean)
        .map((line) => JSON.parse(line) as { level: number; msg: string });
      expect(warnings).toContainEqual(
        expect.objectContaining({
          level: 40,
          msg: 'the upstream is the embedded sandbox (UPSTREAM_URL=sandbox), a simulator: nothing is really booked or delivered',
        }),
      );
    } finally {
      if (child.exitCode === null && child.signalCode === null) {
        const done = exited(child);
        child.kill('SIGTERM');
        await done;
      }
      rmSync(dataDir, { recursive: true, force: true });
    }
  }, 60_000);

  /** Runs a start that must stop at once; its stderr lines and stdout. */
  async function refusedStart(env: Record<string, string>): Promise<{ lines: string[]; stdout: string }> {
    const dataDir = makeDataDir();
    const child = run({ PORT: '0', SANDBOX_PORT: '0', DATA_DIR: dataDir, ...env });
    let stderr = '';
    let stdout = '';
    child.stderr!.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
    child.stdout!.on('data', (chunk: Buffer) => (stdout += chunk.toString()));
    try {
      // A start that serves instead is reported as such, within the test's time.
      const code = await Promise.race([
        exited(child),
        new Promise<string>((resolve) => setTimeout(() => resolve('still running after 15 s'), 15_000)),
      ]);
      expect(code, stderr).toBe(1);
      return { lines: stderr.trim().split('\n'), stdout };
    } finally {
      // A start that did not stop (it served) is not left running.
      if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
      rmSync(dataDir, { recursive: true, force: true });
    }
  }

  it('with an UPSTREAM_URL and no WEBHOOK_PUBLIC_KEY_FILE stops with one line naming it and WEBHOOKS=off', async () => {
    const { lines, stdout } = await refusedStart({
      NODE_ENV: 'production',
      UPSTREAM_URL: 'http://127.0.0.1:9/api/v1',
      PLATFORM_ID: 'acme',
    });
    expect(lines).toEqual([
      "delivery-graph: bad configuration: WEBHOOK_PUBLIC_KEY_FILE: required in production (NODE_ENV=production) when UPSTREAM_URL is set: the PEM file of the upstream's webhook signing key (with WEBHOOK_ISSUER), or WEBHOOKS=off to follow deliveries by polling alone on purpose",
    ]);
    expect(stdout).toBe('');
  });

  it.each([
    ['prod', 'production'],
    ['Production', 'production'],
    ['dev', 'development'],
  ])('NODE_ENV=%s stops the start with one line naming NODE_ENV=%s', async (value, closest) => {
    const { lines } = await refusedStart({ NODE_ENV: value, UPSTREAM_URL: 'sandbox' });
    expect(lines).toEqual([
      `delivery-graph: bad configuration: NODE_ENV: expected production, development or test, got "${value}"; did you mean NODE_ENV=${closest}?`,
    ]);
  });

  it('with WEBHOOKS=off polls on purpose: the banner says so and the webhook path answers 503', async () => {
    const dataDir = makeDataDir();
    const child = run({
      NODE_ENV: 'production',
      UPSTREAM_URL: 'sandbox',
      WEBHOOKS: 'off',
      PORT: '0',
      SANDBOX_PORT: '0',
      DATA_DIR: dataDir,
    });
    let stderr = '';
    child.stderr!.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
    try {
      const [[, url]] = await Promise.all([waitFor(child, /serving on (http:\/\/\S+)/), waitFor(child, /Milestones/)]);
      expect(stderr).toMatch(
        /^ {2}webhooks {12}off \(WEBHOOKS=off\): polling alone, followed deliveries are read every 5000 ms/m,
      );
      expect((await fetch(`${url}/webhooks`, { method: 'POST', body: '{}' })).status).toBe(503);
      expect(await (await fetch(`${url}/health`)).json()).toMatchObject({
        events: { source: 'polling', reconcileIntervalMs: 5000 },
      });
    } finally {
      if (child.exitCode === null && child.signalCode === null) {
        const done = exited(child);
        child.kill('SIGTERM');
        await done;
      }
      rmSync(dataDir, { recursive: true, force: true });
    }
  }, 60_000);

  it('on a busy port suggests the setting, not npm start', async () => {
    const { createServer } = await import('node:net');
    const blocker = createServer();
    await new Promise<void>((resolve) => blocker.listen(0, '127.0.0.1', () => resolve()));
    const port = (blocker.address() as { port: number }).port;
    const dataDir = makeDataDir();
    const child = run({
      NODE_ENV: 'production',
      UPSTREAM_URL: 'sandbox',
      PORT: String(port),
      SANDBOX_PORT: '0',
      DATA_DIR: dataDir,
    });
    try {
      let stderr = '';
      child.stderr!.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
      expect(await exited(child)).toBe(1);
      expect(stderr.trim().split('\n')).toEqual([
        `delivery-graph: port ${port} on 127.0.0.1 is already in use; set PORT to a free port (e.g. PORT=${port + 1})`,
      ]);
    } finally {
      if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
      blocker.close();
      rmSync(dataDir, { recursive: true, force: true });
    }
  });
});

describe('start-up with Redis not there', () => {
  it('stops with one line saying so in our words', async () => {
    const { createServer } = await import('node:net');
    // A port nothing listens on.
    const probe = createServer();
    await new Promise<void>((resolve) => probe.listen(0, '127.0.0.1', () => resolve()));
    const port = (probe.address() as { port: number }).port;
    await new Promise((resolve) => probe.close(resolve));
    const dataDir = makeDataDir();
    const child = run({
      REDIS_URL: `redis://127.0.0.1:${port}`,
      CLIENT_TOKEN_SECRET: 'a-client-token-secret-of-32-chars-or-more',
      PORT: '0',
      SANDBOX_PORT: '0',
      DATA_DIR: dataDir,
    });
    try {
      let stderr = '';
      child.stderr!.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
      expect(await exited(child)).toBe(1);
      expect(stderr.trim().split('\n')).toEqual([
        `delivery-graph failed to start: REDIS_URL: Redis cannot be reached (connect ECONNREFUSED 127.0.0.1:${port})`,
      ]);
    } finally {
      if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
      rmSync(dataDir, { recursive: true, force: true });
    }
  });
});

describe('start-up with a bad variable', () => {
  it('exits 1 with one line naming the variable', async () => {
    const child = run({ UPSTREAM_TIMEOUT_MS: 'soon' });
    let stderr = '';
    child.stderr!.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
    expect(await exited(child)).toBe(1);
    expect(stderr.trim().split('\n')).toHaveLength(1);
    expect(stderr).toContain('UPSTREAM_TIMEOUT_MS');
  });

  it('lists every option with --help', async () => {
    const child = spawn(process.execPath, ['--import', 'tsx', 'src/main.ts', '--help'], {
      cwd: root,
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let stdout = '';
    child.stdout!.on('data', (chunk: Buffer) => (stdout += chunk.toString()));
    expect(await exited(child)).toBe(0);
    for (const name of [
      'PORT',
      'UPSTREAM_URL',
      'PLATFORM_ID',
      'WEBHOOK_PUBLIC_KEY_FILE',
      'REDIS_URL',
      'UPSTREAM_AMOUNT_UNIT',
    ])
      expect(stdout).toContain(name);
  });
});

describe('npm start, exactly as the README runs it', () => {
  /** `npm start` through npm itself (npm → sh → node), as a newcomer types it. */
  const npmStart = (env: Record<string, string>) =>
    spawn('npm', ['start', '--silent'], {
      cwd: root,
      env: { ...process.env, LOG_LEVEL: 'silent', SANDBOX_PORT: '0', ...env },
      stdio: ['ignore', 'pipe', 'pipe'],
    });

  it('stops gracefully on SIGTERM sent to npm: the server goes, no process is left behind', async () => {
    const dataDir = makeDataDir();
    const child = npmStart({ PORT: '0', DATA_DIR: dataDir });
    try {
      const [, url] = await waitFor(child, /serving on (http:\/\/\S+)/);
      expect((await fetch(`${url}/health`)).status).toBe(200);
      const done = new Promise((resolve) => child.once('exit', resolve));
      child.kill('SIGTERM');
      await done;
      // Nothing answers on the port any more, and no process of this run is left (its DATA_DIR is in its environment).
      await expect(fetch(`${url}/health`)).rejects.toThrow();
      const { readdirSync, readFileSync } = await import('node:fs');
      const leftovers = readdirSync('/proc').filter((pid) => {
        try {
          return (
            /^\d+$/.test(pid) &&
            readFileSync(`/proc/${pid}/environ`, 'latin1').split('\0').includes(`DATA_DIR=${dataDir}`)
          );
        } catch {
          return false;
        }
      });
      expect(leftovers).toEqual([]);
    } finally {
      if (child.exitCode === null) child.kill('SIGKILL');
      rmSync(dataDir, { recursive: true, force: true });
    }
  });

  it('says in one line which port is busy and what to change, and exits 1', async () => {
    const { createServer } = await import('node:net');
    const blocker = createServer();
    await new Promise<void>((resolve) => blocker.listen(0, '127.0.0.1', () => resolve()));
    const port = (blocker.address() as { port: number }).port;
    const dataDir = makeDataDir();
    try {
      const child = npmStart({ PORT: String(port), DATA_DIR: dataDir });
      let stderr = '';
      child.stderr!.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
      expect(await exited(child)).toBe(1);
      const lines = stderr
        .trim()
        .split('\n')
        .filter((line) => line.includes('delivery-graph') || line.includes('    at '));
      expect(lines).toEqual([
        `delivery-graph: port ${port} on 127.0.0.1 is already in use; set PORT to a free port (e.g. PORT=${port + 1} npm start)`,
      ]);
      expect(stderr).not.toMatch(/warning/i);
    } finally {
      blocker.close();
      rmSync(dataDir, { recursive: true, force: true });
    }
  });

  it('names every busy port in that one line, the main port and the sandbox port together', async () => {
    const { createServer } = await import('node:net');
    const blockers = [createServer(), createServer()];
    for (const blocker of blockers)
      await new Promise<void>((resolve) => blocker.listen(0, '127.0.0.1', () => resolve()));
    const [port, sandboxPort] = blockers.map((blocker) => (blocker.address() as { port: number }).port) as [
      number,
      number,
    ];
    const dataDir = makeDataDir();
    try {
      const child = npmStart({ PORT: String(port), SANDBOX_PORT: String(sandboxPort), DATA_DIR: dataDir });
      let stderr = '';
      child.stderr!.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
      expect(await exited(child)).toBe(1);
      expect(stderr.trim().split('\n')).toEqual([
        `delivery-graph: port ${port} on 127.0.0.1 is already in use, port ${sandboxPort} on 127.0.0.1 is already in use; ` +
          `set PORT and SANDBOX_PORT to free ports (e.g. PORT=${port + 1} SANDBOX_PORT=${sandboxPort + 1} npm start)`,
      ]);
    } finally {
      for (const blocker of blockers) blocker.close();
      rmSync(dataDir, { recursive: true, force: true });
    }
  });
});

describe('a start that fails', () => {
  it('releases what it had opened: the sandbox port, the store file, the sockets', async () => {
    const { createServer } = await import('node:net');
    const { readdirSync, readlinkSync } = await import('node:fs');
    const { startApp } = await import('../../src/app.js');
    const { loadConfig } = await import('../../src/config.js');
    const free = async () => {
      const probe = createServer();
      await new Promise<void>((resolve) => probe.listen(0, '127.0.0.1', () => resolve()));
      const { port } = probe.address() as { port: number };
      await new Promise((resolve) => probe.close(resolve));
      return port;
    };
    const blocker = createServer();
    await new Promise<void>((resolve) => blocker.listen(0, '127.0.0.1', () => resolve()));
    const busy = (blocker.address() as { port: number }).port;
    const sandboxPort = await free();
    const dataDir = makeDataDir();
    /** Descriptors this process holds on files of the data directory. */
    const openInDataDir = () =>
      readdirSync('/proc/self/fd').filter((fd) => {
        try {
          return readlinkSync(`/proc/self/fd/${fd}`).startsWith(dataDir);
        } catch {
          return false;
        }
      }).length;
    try {
      const failed = await startApp(
        loadConfig({ PORT: String(busy), SANDBOX_PORT: String(sandboxPort), DATA_DIR: dataDir, LOG_LEVEL: 'silent' }),
      ).then(
        () => undefined,
        (error: unknown) => error,
      );
      expect((failed as NodeJS.ErrnoException).code).toBe('EADDRINUSE');
      expect(openInDataDir()).toBe(0);
      // The sandbox's port is free again.
      const probe = createServer();
      await new Promise<void>((resolve, reject) =>
        probe.once('error', reject).listen(sandboxPort, '127.0.0.1', () => resolve()),
      );
      await new Promise((resolve) => probe.close(resolve));
    } finally {
      blocker.close();
      rmSync(dataDir, { recursive: true, force: true });
    }
  });
});

describe('one process per data folder', () => {
  it('a second process on the same DATA_DIR stops at start with one line naming it; a killed holder does not block the next start', async () => {
    const dataDir = makeDataDir();
    const first = run({ PORT: '0', SANDBOX_PORT: '0', DATA_DIR: dataDir });
    try {
      await waitFor(first, /serving on (http:\/\/\S+)/);
      const second = run({ PORT: '0', SANDBOX_PORT: '0', DATA_DIR: dataDir });
      let stderr = '';
      second.stderr!.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
      expect(await exited(second)).toBe(1);
      expect(stderr.trim().split('\n')).toEqual([
        `delivery-graph: DATA_DIR=${dataDir} is in use by another delivery-graph process (pid ${first.pid}): give this one another DATA_DIR, or set REDIS_URL on every instance to run several on one store.`,
      ]);
      // Killed without a chance to clean up: the lock goes with the process.
      first.kill('SIGKILL');
      await exited(first);
      const third = run({ PORT: '0', SANDBOX_PORT: '0', DATA_DIR: dataDir });
      try {
        const [, served] = await waitFor(third, /serving on (http:\/\/\S+)/);
        expect((await fetch(`${served}/health`)).status).toBe(200);
      } finally {
        third.kill('SIGKILL');
        await exited(third);
      }
    } finally {
      if (first.exitCode === null && first.signalCode === null) first.kill('SIGKILL');
      rmSync(dataDir, { recursive: true, force: true });
    }
  });
});

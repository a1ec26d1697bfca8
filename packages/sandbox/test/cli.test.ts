// `npm run sandbox`: the standalone sandbox in a child process, as a demo would
// start it, with the return path and request log flags; the same identity on
// every start (the demo merchants, a signing key kept in its folder, its
// deliveries), and a webhook URL changed while it runs.
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { startWebhookReceiver } from '../../../test/helpers/webhook-receiver.js';

const root = new URL('..', import.meta.url).pathname;
const scratch = mkdtempSync(path.join(tmpdir(), 'sandbox-cli-'));
afterAll(() => rmSync(scratch, { recursive: true, force: true }));

function run(args: string[]): { child: ChildProcess; output: () => string } {
  const child = spawn(process.execPath, ['--import', 'tsx', 'src/main.ts', ...args], {
    cwd: root,
    env: { PATH: process.env.PATH ?? '' },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let text = '';
  child.stdout!.on('data', (chunk: Buffer) => (text += chunk.toString()));
  child.stderr!.on('data', (chunk: Buffer) => (text += chunk.toString()));
  return { child, output: () => text };
}

const exited = (child: ChildProcess) =>
  new Promise<number | null>((resolve) =>
    child.exitCode !== null ? resolve(child.exitCode) : child.once('exit', (code) => resolve(code)),
  );

/** Resolves with the first match of `pattern` in the child's output so far or to come. */
function waitFor(child: ChildProcess, output: () => string, pattern: RegExp): Promise<RegExpMatchArray> {
  return new Promise((resolve, reject) => {
    const check = () => {
      const match = pattern.exec(output());
      if (match) {
        child.stdout!.off('data', check);
        child.off('exit', gone);
        resolve(match);
      }
    };
    const gone = () => reject(new Error(`exited before ${pattern}:\n${output()}`));
    child.stdout!.on('data', check);
    child.once('exit', gone);
    check();
  });
}

describe('npm run sandbox', () => {
  it('documents --return-rate, --request-log-size and the sandbox_outcome payload field in --help', async () => {
    const { child, output } = run(['--help']);
    expect(await exited(child)).toBe(0);
    for (const text of [
      '--return-rate <0..1>',
      '--request-log-size <n>',
      '"sandbox_outcome"',
      'failed_then_returned',
      'canceled_then_returned',
      'delivery.return_in_progress',
      '--data-dir <dir>',
      '--key-file <p>',
      '--in-memory',
      '--history-size <n>',
      'PUT /sandbox/webhook-url',
      'sk_test_demo_merchant',
    ]) {
      expect(output()).toContain(text);
    }
    expect(output()).toMatch(/--step-ms <n> +ms between lifecycle milestones; 0 = manual \(default 3000\)/);
  });

  it('starts with the return rate and log size it was given', async () => {
    const { child, output } = run([
      '--port',
      '0',
      '--return-rate',
      '0.25',
      '--request-log-size',
      '50',
      '--public-key-file',
      path.join(scratch, 'key.pem'),
      '--in-memory',
    ]);
    try {
      const [, control] = await waitFor(child, output, /control:\s+(\S+)/);
      const info = (await (await fetch(control!)).json()) as {
        knobs: { returnRate: number; stepMs: number };
        requestLogSize: number;
      };
      expect(info.knobs.returnRate).toBe(0.25);
      expect(info.requestLogSize).toBe(50);
      // Alone, a milestone every 3 s, as inside the facade with SANDBOX_STEP_MS unset (its config takes DEFAULT_STEP_MS).
      expect(info.knobs.stepMs).toBe(3000);
    } finally {
      child.kill('SIGTERM');
      await exited(child);
    }
  });

  it('refuses a return rate above 1 with a usage error', async () => {
    const { child, output } = run([
      '--port',
      '0',
      '--return-rate',
      '2',
      '--public-key-file',
      path.join(scratch, 'key.pem'),
      '--in-memory',
    ]);
    expect(await exited(child)).toBe(2);
    expect(output()).toContain('returnRate must be between 0 and 1');
  });
});

describe('npm run sandbox, started again', () => {
  const BOOKING = {
    pickup_address_street: 'E 10th St',
    pickup_address_city: 'New York',
    pickup_address_country: 'US',
    pickup_name: 'Corner Deli',
    email: 'deli@example.com',
    dropoff_address_street: 'W 42nd St',
    dropoff_address_city: 'New York',
    dropoff_address_country: 'US',
    dropoff_name: 'Grace Hopper',
    package_delivery_mode: 'NOW',
  };
  const api = async (url: string, method: string, path: string, body?: unknown) => {
    const response = await fetch(`${url}${path}`, {
      method,
      headers: { authorization: 'Bearer sk_test_demo_merchant', 'content-type': 'application/json' },
      body: body === undefined ? undefined : JSON.stringify(body),
    });
    return { status: response.status, body: (await response.json()) as any };
  };
  /** Starts it on `dir`; resolves with its API URL and control origin once it listens. */
  async function start(dir: string, extra: string[] = []) {
    const started = run([
      '--port',
      '0',
      '--step-ms',
      '0',
      '--data-dir',
      dir,
      '--public-key-file',
      path.join(dir, 'public.pem'),
      ...extra,
    ]);
    const [, url] = await waitFor(started.child, started.output, /listening: (\S+)/);
    const [, control] = await waitFor(started.child, started.output, /control:\s+(\S+)\/sandbox\/info/);
    return { ...started, url: url!, origin: control! };
  }
  const stop = async (child: ChildProcess) => {
    child.kill('SIGTERM');
    expect(await exited(child)).toBe(0);
  };

  it('takes the demo merchant key the README teaches, and keeps its signing key and its deliveries across starts', async () => {
    const dir = path.join(scratch, 'identity');
    const first = await start(dir);
    let uid: string;
    let publicKey: string;
    try {
      expect(first.output()).toContain('sk_test_demo_merchant');
      expect((await api(first.url, 'GET', '/sandbox-platform/availability')).status).toBe(200);
      const booked = await api(first.url, 'POST', '/sandbox-platform/deliveries', BOOKING);
      expect(booked.status).toBe(201);
      uid = booked.body.uid;
      publicKey = await (await fetch(`${first.origin}/sandbox/public-key.pem`)).text();
      expect(readFileSync(path.join(dir, 'public.pem'), 'utf8')).toBe(publicKey);
    } finally {
      await stop(first.child);
    }
    const second = await start(dir);
    try {
      expect(await (await fetch(`${second.origin}/sandbox/public-key.pem`)).text()).toBe(publicKey);
      expect(readFileSync(path.join(dir, 'public.pem'), 'utf8')).toBe(publicKey);
      expect(second.output()).toContain('(1 deliveries kept)');
      const read = await api(second.url, 'GET', `/sandbox-platform/deliveries/${uid}`);
      expect([read.status, read.body.data?.status]).toEqual([200, 'CREATED']);
      // One process per folder: a second one says so in one line.
      const third = run(['--port', '0', '--data-dir', dir, '--public-key-file', path.join(dir, 'other.pem')]);
      expect(await exited(third.child)).toBe(1);
      expect(third.output().trim().split('\n')).toEqual([
        expect.stringMatching(
          new RegExp(
            `^sandbox: the sandbox world in ${dir} is in use by another process \\(pid ${second.child.pid}\\)`,
          ),
        ),
      ]);
    } finally {
      await stop(second.child);
    }
  });

  it('changes where webhooks go while it runs (PUT /sandbox/webhook-url)', async () => {
    const dir = path.join(scratch, 'webhook-url');
    const sandbox = await start(dir);
    const publicKeyPem = await (await fetch(`${sandbox.origin}/sandbox/public-key.pem`)).text();
    const receiver = await startWebhookReceiver({ publicKeyPem, issuer: 'lastmile' });
    const setUrl = async (url: unknown) => {
      const response = await fetch(`${sandbox.origin}/sandbox/webhook-url`, {
        method: 'PUT',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ url }),
      });
      return { status: response.status, body: (await response.json()) as any };
    };
    try {
      expect(await setUrl(receiver.url)).toEqual({ status: 200, body: { webhookUrl: receiver.url } });
      expect(((await (await fetch(`${sandbox.origin}/sandbox/info`)).json()) as any).webhookUrl).toBe(receiver.url);
      const uid = (await api(sandbox.url, 'POST', '/sandbox-platform/deliveries', BOOKING)).body.uid as string;
      await receiver.waitFor((events) =>
        events.some((event) => event.uid === uid && event.event_name === 'delivery.created'),
      );
      expect(receiver.rejected).toBe(0);

      expect((await setUrl('not a url')).status).toBe(400);
      expect(await setUrl(null)).toEqual({ status: 200, body: { webhookUrl: null } });
      expect((await fetch(`${sandbox.origin}/sandbox/deliveries/${uid}/advance`, { method: 'POST' })).status).toBe(200);
      const history = (await (await fetch(`${sandbox.origin}/sandbox/deliveries/${uid}/history`)).json()) as any;
      expect(history.events.map((event: any) => [event.event_name, event.fate])).toEqual([
        ['delivery.created', 'delivered'],
        ['delivery.assigned', 'not_sent'],
        ['location.assigned_driver', 'not_sent'],
      ]);
    } finally {
      await stop(sandbox.child);
      await receiver.close();
    }
  });
});

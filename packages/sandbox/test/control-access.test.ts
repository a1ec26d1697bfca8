// Who may use the /sandbox control routes, over real HTTP: open on loopback for
// tests and demos; beyond loopback only with the control token (and not started
// at all without one); in production nothing they could change, nor the merchant
// keys of /sandbox/info, whatever the token. The upstream API is unaffected.
import { spawn } from 'node:child_process';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { CONTROL_TOKEN_HEADER, isLoopbackHost, startSandbox, type Sandbox } from '../src/index.js';

const TOKEN = 'Zq7Vd93LmZ0pX4t8wKc2Hn5R';

/** Every control route that changes the sandbox, with a body it would accept. */
function changingRoutes(uid: string, key: string): { method: string; path: string; body?: unknown; key?: string }[] {
  return [
    { method: 'POST', path: '/sandbox/knobs', body: { errorRate: 1 } },
    { method: 'PUT', path: '/sandbox/webhook-url', body: { url: 'http://127.0.0.1:9/collect' } },
    { method: 'POST', path: `/sandbox/deliveries/${uid}/advance` },
    { method: 'POST', path: `/sandbox/deliveries/${uid}/webhooks/release` },
    { method: 'POST', path: `/sandbox/deliveries/${uid}/reassign` },
    { method: 'POST', path: '/sandbox/orders', body: { partner_reference: 'seeded-by-http' }, key },
    { method: 'POST', path: '/sandbox/merchant-keys', key },
    { method: 'POST', path: '/sandbox/revoke-key', key },
  ];
}

async function call(
  base: string,
  method: string,
  path: string,
  options: { token?: string; body?: unknown; key?: string } = {},
): Promise<{ status: number; body: any }> {
  const headers: Record<string, string> = { 'content-type': 'application/json' };
  if (options.token !== undefined) headers[CONTROL_TOKEN_HEADER] = options.token;
  if (options.key !== undefined) headers.authorization = `Bearer ${options.key}`;
  const res = await fetch(`${base}${path}`, {
    method,
    headers,
    body: options.body === undefined ? undefined : JSON.stringify(options.body),
  });
  const text = await res.text();
  return { status: res.status, body: text.startsWith('{') ? JSON.parse(text) : text };
}

describe('where it listens', () => {
  it('listens on 127.0.0.1 unless told otherwise', async () => {
    const sandbox = await startSandbox({ knobs: { stepMs: 0 } });
    try {
      expect(new URL(sandbox.origin).hostname).toBe('127.0.0.1');
    } finally {
      await sandbox.stop();
    }
  });

  it('refuses to listen beyond loopback without a control token, and opens nothing', async () => {
    for (const host of ['0.0.0.0', '::']) {
      await expect(startSandbox({ host, port: 0, knobs: { stepMs: 0 } })).rejects.toThrow(
        /beyond loopback.*controlToken/,
      );
    }
  });

  it('refuses a control token too short to guard anything, without echoing it', async () => {
    const error = await startSandbox({ controlToken: 'short-secret' }).catch((e: Error) => e);
    expect((error as Error).message).toMatch(/at least 16/);
    expect((error as Error).message).not.toContain('short-secret');
  });

  it('tells loopback from the rest', () => {
    for (const host of ['127.0.0.1', '127.1.2.3', '::1', '[::1]', 'localhost', '::ffff:127.0.0.1'])
      expect(isLoopbackHost(host), host).toBe(true);
    for (const host of ['0.0.0.0', '::', '10.0.0.5', '192.168.1.10', 'example.com', '::ffff:10.0.0.1', ''])
      expect(isLoopbackHost(host), host).toBe(false);
  });
});

describe('beyond loopback, with the control token', () => {
  let sandbox: Sandbox;
  let base: string;
  let key: string;

  beforeAll(async () => {
    sandbox = await startSandbox({ host: '0.0.0.0', controlToken: TOKEN, knobs: { stepMs: 0 } });
    // Listening on every interface; the test reaches it over loopback only.
    expect(new URL(sandbox.origin).hostname).toBe('0.0.0.0');
    base = `http://127.0.0.1:${new URL(sandbox.origin).port}`;
    key = sandbox.merchants[0]!.key;
  });
  afterAll(() => sandbox?.stop());

  it('answers every control route 401 without the token, or with a wrong one, and changes nothing', async () => {
    const uid = sandbox.seedPartnerOrder(key, { partner_reference: 'tokenless' }).uid as string;
    const routes = [
      { method: 'GET', path: '/sandbox/info' },
      { method: 'GET', path: `/sandbox/deliveries/${uid}/history` },
      ...changingRoutes(uid, key),
    ];
    // A wrong token of the same length, a longer one, a prefix: all refused alike.
    for (const token of [undefined, TOKEN.replace(/.$/, 'x'), `${TOKEN}x`, TOKEN.slice(0, 20), ''])
      for (const route of routes) {
        const answer = await call(base, route.method, route.path, { token, body: route.body, key: route.key });
        expect(answer.status, `${route.method} ${route.path} with ${token ?? 'no token'}`).toBe(401);
        expect(answer.body.error).toBe('control_token_required');
        expect(JSON.stringify(answer.body)).not.toContain(TOKEN.slice(0, 12));
      }
    expect(sandbox.knobs.errorRate).toBe(0);
    expect(sandbox.webhookUrl).toBeUndefined();
    expect(sandbox.history(uid)?.status).toBe('CREATED');
    expect(sandbox.merchants).toHaveLength(3);
  });

  it('answers them with the token', async () => {
    const info = await call(base, 'GET', '/sandbox/info', { token: TOKEN });
    expect(info.status).toBe(200);
    expect(info.body.merchants[0].key).toBe(key);
    const knobs = await call(base, 'POST', '/sandbox/knobs', { token: TOKEN, body: { latencyMs: 1 } });
    expect(knobs.status).toBe(200);
    expect(sandbox.knobs.latencyMs).toBe(1);
    sandbox.setKnobs({ latencyMs: 0 });
  });

  it('keeps the public key and the proof images public, and the upstream API on merchant keys alone', async () => {
    const pem = await call(base, 'GET', '/sandbox/public-key.pem');
    expect(pem.status).toBe(200);
    expect(pem.body).toBe(sandbox.publicKeyPem);
    expect((await call(base, 'GET', '/sandbox/proofs/abc/photo.svg')).status).toBe(200);
    const availability = await call(base, 'GET', '/api/v1/availability', { key });
    expect(availability.status).toBe(200);
  });
});

describe('in production', () => {
  let sandbox: Sandbox;
  let key: string;

  beforeAll(async () => {
    sandbox = await startSandbox({ production: true, controlToken: TOKEN, knobs: { stepMs: 0 } });
    key = sandbox.merchants[0]!.key;
  });
  afterAll(() => sandbox?.stop());

  it('refuses every route that would change the sandbox, and /sandbox/info, with 403 whatever the token', async () => {
    const uid = sandbox.seedPartnerOrder(key, { partner_reference: 'in-production' }).uid as string;
    for (const token of [TOKEN, undefined])
      for (const route of [{ method: 'GET', path: '/sandbox/info' }, ...changingRoutes(uid, key)]) {
        const answer = await call(sandbox.origin, route.method, route.path, {
          token,
          body: route.body,
          key: route.key,
        });
        expect(answer.status, `${route.method} ${route.path}`).toBe(403);
        expect(answer.body.error).toBe('refused_in_production');
        expect(JSON.stringify(answer.body)).not.toContain(key);
      }
    // Availability stays on, webhooks stay where the host put them, nothing moved, no key made or revoked.
    expect(sandbox.knobs.errorRate).toBe(0);
    expect((await call(sandbox.url, 'GET', '/availability', { key })).status).toBe(200);
    expect(sandbox.webhookUrl).toBeUndefined();
    expect(sandbox.history(uid)?.status).toBe('CREATED');
    expect(sandbox.merchants).toHaveLength(3);
    expect((await call(sandbox.url, 'GET', `/orders/${uid}`, { key })).status).toBe(200);
  });

  it('still lets the host change it in process, and shows what is public', async () => {
    sandbox.setWebhookUrl('http://127.0.0.1:9/webhooks');
    expect(sandbox.webhookUrl).toBe('http://127.0.0.1:9/webhooks');
    sandbox.setWebhookUrl(undefined);
    expect((await call(sandbox.origin, 'GET', '/sandbox/public-key.pem')).status).toBe(200);
  });
});

describe('npm run sandbox', () => {
  const root = new URL('..', import.meta.url).pathname;
  const run = (args: string[], env: Record<string, string> = {}) =>
    new Promise<{ code: number | null; output: string }>((resolve) => {
      const child = spawn(process.execPath, ['--import', 'tsx', 'src/main.ts', '--in-memory', '--port', '0', ...args], {
        cwd: root,
        env: { PATH: process.env.PATH ?? '', ...env },
        stdio: ['ignore', 'pipe', 'pipe'],
      });
      let output = '';
      const stop = setTimeout(() => child.kill('SIGTERM'), 15_000);
      const onData = (chunk: Buffer) => {
        output += chunk.toString();
        // Started: ask it what a control route answers, then stop it.
        const control = /listening: (http:\/\/\S+)\/api\/v1/.exec(output);
        if (control && !output.includes('\n=> ')) {
          output += '\n=> ';
          call(control[1]!.replace('0.0.0.0', '127.0.0.1'), 'POST', '/sandbox/knobs', { body: { errorRate: 1 } }).then(
            (answer) => {
              output += `${answer.status}\n`;
              child.kill('SIGTERM');
            },
          );
        }
      };
      child.stdout!.on('data', onData);
      child.stderr!.on('data', onData);
      child.once('exit', (code) => {
        clearTimeout(stop);
        resolve({ code, output });
      });
    });

  it('will not listen beyond loopback without SANDBOX_CONTROL_TOKEN', async () => {
    const { code, output } = await run(['--host', '0.0.0.0']);
    expect(code).toBe(2);
    expect(output).toContain('--host 0.0.0.0 is beyond loopback: set SANDBOX_CONTROL_TOKEN');
  });

  it('takes the token from the environment, and locks its control routes with NODE_ENV=production', async () => {
    const guarded = await run(['--host', '0.0.0.0'], { SANDBOX_CONTROL_TOKEN: TOKEN });
    expect(guarded.output).toContain('=> 401');
    expect(guarded.output).not.toContain(TOKEN);
    const production = await run([], { NODE_ENV: 'production' });
    expect(production.output).toContain('=> 403');
  });
});

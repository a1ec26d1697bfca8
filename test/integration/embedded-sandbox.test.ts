// The sandbox the facade embeds (UPSTREAM_URL unset, or "sandbox"), as an
// operator deploys it: on loopback whatever HOST says, its control routes behind
// SANDBOX_CONTROL_TOKEN beyond loopback, and in production refusing to change
// anything or to show the merchant keys, while the facade itself goes on using it.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { CONTROL_TOKEN_HEADER } from '@delivery-graph/sandbox';
import { afterEach, describe, expect, it } from 'vitest';
import { startApp, type App } from '../../src/app.js';
import { loadConfig } from '../../src/config.js';
import { deliveryInput } from '../helpers/stack.js';

const TOKEN = 'Hk3vR8wQz1Lm6Tn0Yp4sXc9B';
const CREATE = `mutation($input: DeliveryInput!) { createDelivery(input: $input) { __typename ... on MutationCreateDeliverySuccess { data { uid } } } }`;

let app: App | undefined;
let dataDir: string | undefined;
afterEach(async () => {
  await app?.stop();
  app = undefined;
  if (dataDir) rmSync(dataDir, { recursive: true, force: true });
});

async function start(env: Record<string, string>): Promise<App> {
  dataDir = mkdtempSync(path.join(tmpdir(), 'embedded-sandbox-'));
  app = await startApp(loadConfig({ PORT: '0', SANDBOX_PORT: '0', DATA_DIR: dataDir, LOG_LEVEL: 'silent', ...env }));
  return app;
}

/** A control route of the embedded sandbox, reached over loopback. */
async function control(
  started: App,
  method: string,
  route: string,
  options: { token?: string; body?: unknown } = {},
): Promise<{ status: number; body: any }> {
  const port = new URL(started.sandbox!.origin).port;
  const headers: Record<string, string> = { 'content-type': 'application/json' };
  if (options.token) headers[CONTROL_TOKEN_HEADER] = options.token;
  const res = await fetch(`http://127.0.0.1:${port}${route}`, {
    method,
    headers,
    body: options.body === undefined ? undefined : JSON.stringify(options.body),
  });
  return { status: res.status, body: await res.json() };
}

describe('the embedded sandbox', () => {
  it('listens on loopback when the facade listens on every interface (HOST=0.0.0.0)', async () => {
    const started = await start({ HOST: '0.0.0.0' });
    expect(new URL(started.sandbox!.origin).hostname).toBe('127.0.0.1');
    // Open on loopback, as tests and demos use it.
    expect((await control(started, 'GET', '/sandbox/info')).status).toBe(200);
  });

  it('beyond loopback (SANDBOX_HOST=0.0.0.0), answers its control routes only with SANDBOX_CONTROL_TOKEN', async () => {
    const started = await start({ SANDBOX_HOST: '0.0.0.0', SANDBOX_CONTROL_TOKEN: TOKEN });
    expect(new URL(started.sandbox!.origin).hostname).toBe('0.0.0.0');
    const open = await control(started, 'PUT', '/sandbox/webhook-url', { body: { url: 'http://127.0.0.1:9/x' } });
    expect(open.status).toBe(401);
    expect(open.body.error).toBe('control_token_required');
    expect(started.sandbox!.webhookUrl).toBe(started.webhookUrl);
    const info = await control(started, 'GET', '/sandbox/info', { token: TOKEN });
    expect(info.status).toBe(200);
    expect(info.body.merchants[0].key).toBe('sk_test_demo_merchant');
  });

  it('in production (UPSTREAM_URL=sandbox), refuses every change and /sandbox/info, token or not; the facade goes on', async () => {
    const started = await start({ NODE_ENV: 'production', UPSTREAM_URL: 'sandbox', SANDBOX_CONTROL_TOKEN: TOKEN });
    for (const token of [undefined, TOKEN]) {
      const info = await control(started, 'GET', '/sandbox/info', { token });
      expect(info.status).toBe(403);
      expect(info.body.error).toBe('refused_in_production');
      expect(JSON.stringify(info.body)).not.toContain('sk_test_');
      const hijack = await control(started, 'PUT', '/sandbox/webhook-url', {
        token,
        body: { url: 'http://127.0.0.1:9/collect' },
      });
      expect(hijack.status).toBe(403);
      expect((await control(started, 'POST', '/sandbox/knobs', { token, body: { errorRate: 1 } })).status).toBe(403);
    }
    // Webhooks still go to the facade, and the upstream still books.
    expect(started.sandbox!.webhookUrl).toBe(started.webhookUrl);
    expect(started.sandbox!.knobs.errorRate).toBe(0);
    const response = await fetch(`${started.url}/graphql`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', authorization: 'Bearer sk_test_demo_merchant' },
      body: JSON.stringify({ query: CREATE, variables: { input: deliveryInput() } }),
    });
    const result = (await response.json()) as any;
    expect(result.data.createDelivery.__typename).toBe('MutationCreateDeliverySuccess');
  });
});

// The tracking page as HTTP sees it (the browser test drives it for real):
// served from the facade with a strict CSP, cacheable assets, the sandbox key
// only when the sandbox is the upstream, and off with TRACKING_PAGE=false.
import { rmSync } from 'node:fs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startApp, type App } from '../../src/app.js';
import { ConfigError, loadConfig } from '../../src/config.js';
import { makeDataDir, startStack, type Stack } from '../helpers/stack.js';

describe('tracking page over HTTP, embedded sandbox', () => {
  let app: App;
  let dataDir: string;
  beforeAll(async () => {
    dataDir = makeDataDir();
    app = await startApp(loadConfig({ PORT: '0', SANDBOX_PORT: '0', DATA_DIR: dataDir, LOG_LEVEL: 'silent' }));
  });
  afterAll(async () => {
    await app.stop();
    rmSync(dataDir, { recursive: true, force: true });
  });

  it('serves the page with the sandbox key, a strict CSP, and its own script and stylesheet', async () => {
    const response = await fetch(`${app.url}/`);
    expect(response.status).toBe(200);
    expect(response.headers.get('content-type')).toBe('text/html; charset=utf-8');
    expect(response.headers.get('cache-control')).toBe('no-cache');
    const csp = response.headers.get('content-security-policy')!;
    expect(csp).toContain("default-src 'none'");
    expect(csp).toContain("script-src 'self'");
    expect(csp).toContain("connect-src 'self'");
    expect(csp).not.toContain('unsafe-inline');
    const html = await response.text();
    expect(html).toContain('<meta name="dg-sandbox-key" content="sk_test_demo_merchant">');
    // Every script and stylesheet is local, and named by content.
    const refs = [...html.matchAll(/(?:src|href)="([^"]+)"/g)].map((m) => m[1]!);
    expect(refs.filter((ref) => /^(https?:)?\/\//.test(ref))).toEqual([]);
    const script = refs.find((ref) => ref.startsWith('/tracking/app.js?v='))!;
    const style = refs.find((ref) => ref.startsWith('/tracking/app.css?v='))!;
    expect(script).toBeDefined();
    expect(style).toBeDefined();
    expect((await fetch(`${app.url}/index.html`)).status).toBe(200);

    const js = await fetch(`${app.url}${script}`);
    expect(js.status).toBe(200);
    expect(js.headers.get('content-type')).toBe('text/javascript; charset=utf-8');
    expect(js.headers.get('cache-control')).toContain('immutable');
    const code = await js.text();
    expect(code).toContain('graphql-transport-ws');
    expect(code).not.toMatch(/https?:\/\/(?!www\.w3\.org)[a-z]/i);
    const css = await fetch(`${app.url}${style}`);
    expect(css.headers.get('content-type')).toBe('text/css; charset=utf-8');
    expect(await css.text()).toContain('#timeline');
  });

  it('answers conditional requests with 304, HEAD without a body, and other methods with 405', async () => {
    const first = await fetch(`${app.url}/tracking/app.js`);
    const etag = first.headers.get('etag')!;
    await first.arrayBuffer();
    const again = await fetch(`${app.url}/tracking/app.js`, { headers: { 'if-none-match': etag } });
    expect(again.status).toBe(304);
    const head = await fetch(`${app.url}/`, { method: 'HEAD' });
    expect(head.status).toBe(200);
    expect(Number(head.headers.get('content-length'))).toBeGreaterThan(500);
    expect(await head.text()).toBe('');
    const post = await fetch(`${app.url}/`, { method: 'POST', body: 'x' });
    expect(post.status).toBe(405);
    expect(post.headers.get('allow')).toBe('GET, HEAD');
    expect((await fetch(`${app.url}/tracking/other.js`)).status).toBe(404);
  });
});

describe('tracking page with a configured upstream', () => {
  let stack: Stack;
  afterAll(() => stack?.stop());

  it('does not offer a key when the upstream is not the embedded sandbox', async () => {
    stack = await startStack();
    const html = await (await fetch(`${stack.app.url}/`)).text();
    expect(html).toContain('id="key"');
    expect(html).not.toContain('dg-sandbox-key');
    expect(html).not.toContain(stack.key);
  });

  it('is gone with TRACKING_PAGE=false', async () => {
    await stack.stop();
    stack = await startStack({ env: { TRACKING_PAGE: 'false' } });
    const response = await fetch(`${stack.app.url}/`);
    expect(response.status).toBe(404);
    expect((await fetch(`${stack.app.url}/tracking/app.js`)).status).toBe(404);
  });

  it('keeps the webhook path off the page and its assets', () => {
    for (const path of ['/', '/index.html', '/tracking/hooks']) {
      expect(() => loadConfig({ WEBHOOK_PATH: path })).toThrow(ConfigError);
    }
    expect(() => loadConfig({ TRACKING_PAGE: 'maybe' })).toThrow(/TRACKING_PAGE/);
  });
});

// GraphiQL is served from bundled assets (it must work offline), with the example
// operations and the header to set already filled in. The page is a few KB; its
// script, stylesheet, workers, fonts and icon are files of their own under
// /graphiql/, named by content, cached for a year and sent compressed.
import { createHash } from 'node:crypto';
import { request } from 'node:http';
import { brotliDecompressSync, gunzipSync } from 'node:zlib';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { GRAPHIQL_EXAMPLES } from '../../src/web/graphiql.js';
import { startStack, type Stack } from '../helpers/stack.js';

let stack: Stack;
beforeAll(async () => {
  stack = await startStack();
});
afterAll(async () => {
  await stack?.stop();
});

interface Raw {
  status: number;
  headers: Record<string, string | string[] | undefined>;
  /** The bytes as sent, still compressed when content-encoding says so. */
  body: Buffer;
}

/** A request that leaves the body as it came over the wire (fetch would decompress it). */
function raw(path: string, headers: Record<string, string> = {}, method = 'GET'): Promise<Raw> {
  return new Promise((resolve, reject) => {
    const req = request(`${stack.app.url}${path}`, { method, headers }, (res) => {
      const chunks: Buffer[] = [];
      res.on('data', (chunk: Buffer) => chunks.push(chunk));
      res.on('end', () => resolve({ status: res.statusCode!, headers: res.headers, body: Buffer.concat(chunks) }));
      res.on('error', reject);
    });
    req.on('error', reject);
    req.end();
  });
}

const page = () => raw('/graphql', { accept: 'text/html' });

/** What the page hands GraphiQL: Monaco's worker URLs and GraphiQL's options. */
function configOf(html: string): {
  workers: Record<string, string>;
  options: { title: string; headers: string; defaultQuery: string };
} {
  const json = /<script id="graphiql-config" type="application\/json">([^<]*)<\/script>/.exec(html)?.[1];
  expect(json).toBeDefined();
  return JSON.parse(json!);
}

const bookKey = (html: string) =>
  /idempotencyKey: "(graphiql-book-[\w-]+)"/.exec(configOf(html).options.defaultQuery)?.[1];

/** Every file the page can load: what the HTML links, Monaco's workers, and what the stylesheet points at. */
async function assetPaths(html: string): Promise<{ linked: string[]; workers: string[]; fromCss: string[] }> {
  const linked = [...html.matchAll(/<(?:script|link)\b[^>]*?(?:src|href)="([^"]+)"/g)].map((m) => m[1]!);
  const workers = Object.values(configOf(html).workers);
  const stylesheet = linked.find((path) => path.endsWith('.css'))!;
  const css = (await raw(stylesheet)).body.toString();
  const fromCss = [...css.matchAll(/url\(\s*["']?([^"')]+)/g)].map((m) => m[1]!);
  return { linked, workers, fromCss: [...new Set(fromCss)] };
}

describe('GraphiQL', () => {
  it('is a small page, never cached, that loads nothing from another host', async () => {
    const response = await page();
    expect(response.status).toBe(200);
    expect(response.headers['content-type']).toBe('text/html; charset=utf-8');
    expect(response.headers['cache-control']).toBe('no-cache');
    const html = response.body.toString();
    expect(html).toContain('<html');
    // The whole bundle used to be inlined here: 9 MB on every load.
    expect(response.body.length).toBeLessThan(10_000);
    const external = [...html.matchAll(/<(?:script|link)\b[^>]*(?:src|href)=["'](https?:)?\/\/[^"']+/gi)].map(
      (m) => m[0],
    );
    expect(external).toEqual([]);
    // No inline script to allow: the options travel as JSON, the code comes from the facade's files.
    const csp = String(response.headers['content-security-policy']);
    expect(csp).toContain("default-src 'none'");
    expect(csp).toContain("script-src 'self';");
    expect(csp).not.toMatch(/https?:|\*/);
    expect(
      [...html.matchAll(/<script\b([^>]*)>/g)]
        .map((m) => m[1]!)
        .filter((attributes) => !/\bsrc=|type="application\/json"/.test(attributes)),
    ).toEqual([]);
  });

  it('opens with example operations, the title and the Authorization header to set', async () => {
    const html = (await page()).body.toString();
    expect(html).toContain('<title>delivery-graph</title>');
    const { options } = configOf(html);
    expect(options.title).toBe('delivery-graph');
    expect(options.defaultQuery).toContain('mutation Book');
    expect(options.defaultQuery).toContain('subscription Follow');
    expect(JSON.parse(options.headers)).toEqual({ Authorization: 'Bearer <merchant key>' });
    // In-process callers of yoga get the same page.
    const inProcess = await (
      await stack.app.yoga.fetch('http://localhost/graphql', { headers: { accept: 'text/html' } })
    ).text();
    expect(configOf(inProcess).options.defaultQuery).toContain('mutation Book');
    expect(inProcess).toMatch(/<script src="\/graphiql\/graphiql\.[0-9a-f]{16}\.js" defer><\/script>/);
  });

  it('gives the example booking a new idempotency key on every load, so running it after a reload books again', async () => {
    const [first, second] = [(await page()).body.toString(), (await page()).body.toString()];
    const [key1, key2] = [bookKey(first), bookKey(second)];
    expect(key1).toMatch(/^graphiql-book-[\w-]{12}$/);
    expect(key2).toMatch(/^graphiql-book-[\w-]{12}$/);
    expect(key2).not.toBe(key1);
    // Only the key differs from the examples as written.
    expect(configOf(first).options.defaultQuery.replace(key1!, 'graphiql-book-KEY')).toBe(GRAPHIQL_EXAMPLES);

    const run = async (html: string) => {
      const response = await fetch(`${stack.app.url}/graphql`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', authorization: `Bearer ${stack.key}` },
        body: JSON.stringify({ query: configOf(html).options.defaultQuery, operationName: 'Book' }),
      });
      const body = (await response.json()) as { data: { createDelivery: { data: { uid: string } } } };
      return body.data.createDelivery.data.uid;
    };
    const uid = await run(first);
    expect(uid).toMatch(/^[0-9a-f-]{36}$/);
    // Again on the same page: the same booking (that is what the key is for); after a reload: a new one.
    expect(await run(first)).toBe(uid);
    expect(await run(second)).not.toBe(uid);
  });

  it('serves every asset under a content hash, cached for a year, compressed when that helps, all from the facade', async () => {
    const html = (await page()).body.toString();
    const { linked, workers, fromCss } = await assetPaths(html);
    expect(linked.some((path) => path.endsWith('.js'))).toBe(true);
    expect(linked.some((path) => path.endsWith('.ico'))).toBe(true);
    expect(Object.keys(configOf(html).workers).sort()).toEqual(['editorWorkerService', 'graphql', 'json']);
    // The stylesheet's fonts are files too, not data: URLs.
    expect(fromCss.some((path) => path.endsWith('.woff2'))).toBe(true);
    const all = [...new Set([...linked, ...workers, ...fromCss])];
    expect(
      all.filter((path) => !/^\/graphiql\/[\w.]+\.[0-9a-f]{16}\.(js|css|ico|woff2?|ttf|png|svg)$/.test(path)),
    ).toEqual([]);

    let identityBytes = 0;
    let brotliBytes = 0;
    for (const path of all) {
      const plain = await raw(path, { 'accept-encoding': 'identity' });
      expect(plain.status, path).toBe(200);
      expect(plain.headers['cache-control'], path).toBe('public, max-age=31536000, immutable');
      expect(plain.headers['content-encoding'], path).toBeUndefined();
      expect(plain.headers.etag, path).toBeDefined();
      // Named by content: the hash in the name is the file's.
      const hash = /\.([0-9a-f]{16})\.\w+$/.exec(path)![1];
      expect(createHash('sha256').update(plain.body).digest('hex').slice(0, 16), path).toBe(hash);
      identityBytes += plain.body.length;

      const br = await raw(path, { 'accept-encoding': 'gzip, deflate, br' });
      const gz = await raw(path, { 'accept-encoding': 'gzip' });
      brotliBytes += br.body.length;
      if (/\.(js|css|ico|ttf|svg)$/.test(path)) {
        expect(br.headers['content-encoding'], path).toBe('br');
        expect(brotliDecompressSync(br.body).equals(plain.body), path).toBe(true);
        expect(gz.headers['content-encoding'], path).toBe('gzip');
        expect(gunzipSync(gz.body).equals(plain.body), path).toBe(true);
        expect(br.headers.vary, path).toBe('accept-encoding');
        expect(br.headers.etag, path).not.toBe(plain.headers.etag);
      } else {
        // woff, woff2 and png are compressed formats already.
        expect(br.headers['content-encoding'], path).toBeUndefined();
      }
    }
    // What was 9 MB in every page load now crosses the wire once, at about a sixth of the size.
    expect(identityBytes).toBeGreaterThan(8_000_000);
    expect(brotliBytes).toBeLessThan(identityBytes / 4);

    // Nothing the page loads points anywhere but the facade.
    const css = (
      await raw(
        linked.find((path) => path.endsWith('.css'))!,
        { 'accept-encoding': 'identity' },
      )
    ).body.toString();
    expect(css).not.toMatch(/@import|url\(\s*["']?(?:https?:)?\/\//);
    expect(css).not.toContain('data:font');
  });

  it('answers conditional requests with 304, HEAD without a body, other methods with 405 and unknown files with 404', async () => {
    const html = (await page()).body.toString();
    const script = /<script src="([^"]+)"/.exec(html)![1]!;
    const first = await raw(script, { 'accept-encoding': 'br' });
    const again = await raw(script, { 'accept-encoding': 'br', 'if-none-match': String(first.headers.etag) });
    expect(again.status).toBe(304);
    expect(again.body.length).toBe(0);
    const head = await raw(script, { 'accept-encoding': 'br' }, 'HEAD');
    expect(head.status).toBe(200);
    expect(Number(head.headers['content-length'])).toBe(first.body.length);
    expect(head.body.length).toBe(0);
    expect((await raw(script, {}, 'POST')).status).toBe(405);
    expect((await raw('/graphiql/graphiql.0000000000000000.js')).status).toBe(404);
    // A GraphQL GET that is not a browser asking for a page still runs.
    const query = await fetch(`${stack.app.url}/graphql?query=${encodeURIComponent('{ __typename }')}`, {
      headers: { authorization: `Bearer ${stack.key}` },
    });
    expect(await query.json()).toEqual({ data: { __typename: 'Query' } });
  });

  it('is off in production unless introspection is enabled, its files too', async () => {
    const script = /<script src="([^"]+)"/.exec((await page()).body.toString())![1]!;
    const production = await startStack({ env: { NODE_ENV: 'production' } });
    try {
      const response = await fetch(`${production.app.url}/graphql`, { headers: { accept: 'text/html' } });
      expect(await response.text()).not.toContain('mutation Book');
      expect((await fetch(`${production.app.url}${script}`)).status).toBe(404);
    } finally {
      await production.stop();
    }
  });
});

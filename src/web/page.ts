// The live tracking page at `/`: one HTML document plus the script and the
// stylesheet built from src/web/client (src/web/bundle.ts: at `npm run build`,
// or on the first request of a run from the sources), kept in memory. Everything
// is served from here (no CDN), under a Content-Security-Policy that allows
// nothing from elsewhere.
import { createHash } from 'node:crypto';
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { Logger } from '../logger.js';
import { loadBundle } from './bundle.js';

export interface TrackingPageOptions {
  /** Path of the GraphQL endpoint (HTTP and WebSocket). */
  graphqlPath: string;
  /** The sandbox's demo key, filled in on the page when the sandbox is the upstream. */
  sandboxKey: string | undefined;
  /** Whether GraphiQL is on, so the page can link to it. */
  graphiql: boolean;
  logger: Logger;
}

export interface TrackingPage {
  /** Answers GET/HEAD for `/`, `/index.html` and `/tracking/*`; returns false for any other path. */
  handle(req: IncomingMessage, res: ServerResponse, pathname: string): boolean;
}

interface Asset {
  body: Buffer;
  type: string;
  etag: string;
}

interface Bundle {
  html: Asset;
  js: Asset;
  css: Asset;
  version: string;
}

const SECURITY_HEADERS = {
  // Scripts, styles and sockets from this origin only; no inline script, no frames, no forms posting elsewhere.
  'content-security-policy':
    "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self' data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'",
  'x-content-type-options': 'nosniff',
  'referrer-policy': 'no-referrer',
};

function asset(body: string | Uint8Array, type: string): Asset {
  const buffer = Buffer.from(body);
  return { body: buffer, type, etag: `"${createHash('sha256').update(buffer).digest('base64url').slice(0, 22)}"` };
}

function escapeAttribute(value: string): string {
  return value.replace(/&/g, '&amp;').replace(/"/g, '&quot;').replace(/</g, '&lt;').replace(/>/g, '&gt;');
}

/** The page and its two files, from the static bundle (src/web/bundle.ts). */
async function bundle(options: TrackingPageOptions): Promise<Bundle> {
  const files = await loadBundle();
  const jsAsset = asset(files.js, 'text/javascript; charset=utf-8');
  const cssAsset = asset(files.css, 'text/css; charset=utf-8');
  const version = createHash('sha256').update(jsAsset.etag).update(cssAsset.etag).digest('base64url').slice(0, 12);
  return { html: asset(renderHtml(options, version), 'text/html; charset=utf-8'), js: jsAsset, css: cssAsset, version };
}

function renderHtml(options: TrackingPageOptions, version: string): string {
  const sandboxMeta = options.sandboxKey
    ? `\n<meta name="dg-sandbox-key" content="${escapeAttribute(options.sandboxKey)}">`
    : '';
  // Hidden until the script knows the view: a merchant's gets it, a customer's (a client token link) never does.
  const graphiqlLink = options.graphiql
    ? `<a id="graphiql-link" href="${escapeAttribute(options.graphqlPath)}" hidden>GraphiQL</a>`
    : '';
  return `<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>delivery-graph · live tracking</title>
<meta name="dg-graphql" content="${escapeAttribute(options.graphqlPath)}">${sandboxMeta}
<link rel="icon" href="data:,">
<link rel="stylesheet" href="/tracking/app.css?v=${version}">
<script type="module" src="/tracking/app.js?v=${version}"></script>
</head>
<body>
<header>
  <h1>delivery-graph <span>live tracking</span></h1>
  <nav>${graphiqlLink}<span id="connection" role="status" data-state="none">not following</span></nav>
</header>
<main>
  <section class="controls">
    <form id="key-form" autocomplete="off">
      <label>Merchant key<input id="key" name="key" type="password" autocomplete="off" spellcheck="false" placeholder="sk_…" aria-describedby="key-hint"></label>
    </form>
    <form id="book-form" hidden>
      <button id="book" type="submit">Book a sandbox delivery</button>
    </form>
    <form id="open-form" autocomplete="off">
      <label>Delivery uid<input id="uid-input" name="uid" autocomplete="off" spellcheck="false" placeholder="uid of a booked delivery"></label>
      <button id="open" class="secondary" type="submit">Track</button>
    </form>
  </section>
  <p id="key-hint" hidden>Sent as the connection's authorization; never stored.</p>
  <p id="message" role="status" aria-live="polite"></p>
  <section id="tracker" class="tracker" hidden>
    <div class="panel">
      <svg id="map" viewBox="0 0 640 420" role="img" aria-label="Map of the pickup, the dropoff and the courier's position"></svg>
      <dl class="facts">
        <dt>Delivery</dt><dd id="fact-uid"></dd>
        <dt>Status</dt><dd id="fact-status"></dd>
        <dt>Courier</dt><dd id="fact-courier"></dd>
        <dt>To the dropoff</dt><dd id="fact-left"></dd>
        <dt>Expected at</dt><dd id="fact-eta"></dd>
      </dl>
    </div>
    <div class="panel">
      <h2>Timeline</h2>
      <ol id="timeline"></ol>
    </div>
  </section>
</main>
<footer>
  Live through GraphQL subscriptions over graphql-ws (<code>deliveryUpdated</code> and <code>courierLocation</code>), fed by the upstream's signed webhooks.
  The map is drawn from the coordinates alone: no tiles, nothing loaded from elsewhere.
</footer>
</body>
</html>
`;
}

export function createTrackingPage(options: TrackingPageOptions): TrackingPage {
  let built: Promise<Bundle> | undefined;
  const load = () => {
    built ??= bundle(options).catch((error: unknown) => {
      built = undefined; // try again on the next request
      throw error;
    });
    return built;
  };

  const send = (req: IncomingMessage, res: ServerResponse, pick: (bundle: Bundle) => Asset, cacheControl: string) => {
    load().then(
      (loaded) => {
        const { body, type, etag } = pick(loaded);
        const headers = { 'content-type': type, etag, 'cache-control': cacheControl, ...SECURITY_HEADERS };
        if (req.headers['if-none-match'] === etag) return void res.writeHead(304, headers).end();
        res.writeHead(200, { ...headers, 'content-length': body.length });
        res.end(req.method === 'HEAD' ? undefined : body);
      },
      (error: unknown) => {
        options.logger.error({ err: error }, 'the tracking page could not be built');
        res
          .writeHead(500, { 'content-type': 'text/plain; charset=utf-8' })
          .end('The tracking page could not be built; see the server log.\n');
      },
    );
  };

  return {
    handle(req, res, pathname) {
      const isPage = pathname === '/' || pathname === '/index.html';
      if (!isPage && !pathname.startsWith('/tracking/')) return false;
      if (req.method !== 'GET' && req.method !== 'HEAD') {
        res.writeHead(405, { allow: 'GET, HEAD', 'content-type': 'application/json' }).end(
          JSON.stringify({
            error: 'method_not_allowed',
            message: `${pathname} answers GET and HEAD only; GraphQL is POSTed to /graphql.`,
          }),
        );
        return true;
      }
      // The assets are named by content (?v=), so they may be kept; the page itself is always revalidated.
      const immutable = 'public, max-age=31536000, immutable';
      if (isPage) send(req, res, (b) => b.html, 'no-cache');
      else if (pathname === '/tracking/app.js') send(req, res, (b) => b.js, immutable);
      else if (pathname === '/tracking/app.css') send(req, res, (b) => b.css, immutable);
      else return false;
      return true;
    },
  };
}

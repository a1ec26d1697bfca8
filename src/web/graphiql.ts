// GraphiQL, in a browser at the GraphQL endpoint, from the assets that
// @graphql-yoga/render-graphiql bundles (no CDN: it works offline). That package
// inlines them all into one 9 MB page; here they are served as separate files
// under /graphiql/, named by content so browsers keep them for a year, and sent
// compressed (brotli or gzip, computed once per process). The page itself is a
// few KB, never cached, and carries the example operations, the header to set,
// and a fresh idempotency key for the example booking on every load.
import { createHash, randomBytes } from 'node:crypto';
import type { IncomingMessage, ServerResponse } from 'node:http';
import { promisify } from 'node:util';
import { brotliCompress, constants as zlib, gzip } from 'node:zlib';
import type { GraphiQLOptions } from 'graphql-yoga';
import type { Logger } from '../logger.js';

/** Where the assets are served; nothing else may live under it (WEBHOOK_PATH included). */
export const GRAPHIQL_ASSET_PREFIX = '/graphiql/';

/** Stands for the example booking's idempotency key until a page is rendered. */
const BOOK_KEY_PLACEHOLDER = 'graphiql-book-KEY';
/**
 * A rendered key: the placeholder's prefix and 12 random base64url characters (the page's script renews stored copies).
 */
const BOOK_KEY_PATTERN = 'graphiql-book-[A-Za-z0-9_-]{12}';

/** The operations GraphiQL opens with: each one runs against the sandbox as it is. */
export const GRAPHIQL_EXAMPLES = `# delivery-graph: set the Authorization header below (the sandbox's key is filled in
# when the sandbox is the upstream), pick an operation, and run it.

query Availability {
  availability { group service available }
}

# The key is new each time this page loads: running Book again on the same page
# returns the same booking; reload the page to book another.
mutation Book {
  createDelivery(
    idempotencyKey: "graphiql-book-KEY"
    input: {
      pickup: { name: "Ada Shop", email: "shop@example.com", address: { street: "Main St", city: "San Francisco", country: "US" } }
      dropoff: { name: "Grace", address: { street: "Elm St", city: "San Francisco", country: "US" } }
      mode: NOW
      tip: "3.50"
    }
  ) {
    ... on MutationCreateDeliverySuccess { data { uid trackingUrl status } }
    ... on Error { code message }
  }
}

# Paste the uid from Book, then run Follow and watch the courier move.
subscription Follow {
  deliveryUpdated(uid: "<uid>") { status name receivedAt courierLocation { lat lng } }
}

query Read {
  deliveries(uids: ["<uid>"]) { uid status price { amount currency } courier { name location { lat lng } } }
}

# A token for a customer's browser instead of the merchant key: it reads and follows
# these uids only. Open /#token=<token> for the tracking page, or send it as the
# Authorization header ("Bearer <token>") and run Read or Follow with it.
mutation ClientToken {
  createClientToken(uids: ["<uid>"], ttlSeconds: 3600) {
    ... on MutationCreateClientTokenSuccess { data { token expiresAt uids } }
    ... on Error { code message }
  }
}

# delivery-graph is a federation subgraph: this is how a gateway (Hive Gateway, Apollo
# Router) reads deliveries another subgraph refers to by uid (docs/federation.md).
query Entities {
  _entities(representations: [{ __typename: "Delivery", uid: "<uid>" }]) {
    ... on Delivery { uid status dropoff { name } }
  }
}

# Clients may also send any of these as Apollo automatic persisted queries (the hash
# alone, the query once when asked): docs/persisted-queries.md.
`;

/** The examples with a key no earlier page load had. */
export function graphiqlExamples(): string {
  return GRAPHIQL_EXAMPLES.replace(BOOK_KEY_PLACEHOLDER, `graphiql-book-${randomBytes(9).toString('base64url')}`);
}

export interface GraphiQLPageOptions {
  /** Path of the GraphQL endpoint: the page is served there to browsers (Accept: text/html). */
  graphqlPath: string;
  /** The sandbox's demo key, filled in as the Authorization header when the sandbox is the upstream. */
  sandboxKey: string | undefined;
  logger: Logger;
}

export interface GraphiQLPage {
  /** yoga's `graphiql` option: fresh options (examples, header, title) for each page. */
  options(): GraphiQLOptions;
  /**
   * Answers a browser's GET/HEAD of the GraphQL path (the page) and anything
   * under /graphiql/ (the assets); returns false for any other request.
   */
  handle(req: IncomingMessage, res: ServerResponse, pathname: string): boolean;
}

// ---------------------------------------------------------------- assets

interface Asset {
  path: string;
  type: string;
  body: Buffer;
  etag: string;
  /** Compressed copies that are worth sending, made once in the background. */
  encoded: Promise<Partial<Record<Encoding, Buffer>>>;
}

type Encoding = 'br' | 'gzip';

interface Assets {
  byPath: Map<string, Asset>;
  script: string;
  stylesheet: string;
  favicon: string;
  /** Monaco's web workers, by the label Monaco asks for. */
  workers: Record<string, string>;
}

const IMMUTABLE = 'public, max-age=31536000, immutable';

const SECURITY_HEADERS = {
  // Monaco adds <style> elements as it goes, hence 'unsafe-inline' for styles only; scripts and
  // workers come from the facade's files, never from inline code, and nothing from another origin.
  'content-security-policy':
    "default-src 'none'; script-src 'self'; worker-src 'self'; style-src 'self' 'unsafe-inline'; font-src 'self'; img-src 'self' data:; connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'",
  'x-content-type-options': 'nosniff',
  'referrer-policy': 'no-referrer',
};

/** File extension and whether compressing helps (woff, woff2 and png are compressed already). */
const TYPES: Record<string, { extension: string; compress: boolean }> = {
  'text/javascript; charset=utf-8': { extension: 'js', compress: true },
  'text/css; charset=utf-8': { extension: 'css', compress: true },
  'font/woff2': { extension: 'woff2', compress: false },
  'font/woff': { extension: 'woff', compress: false },
  'font/ttf': { extension: 'ttf', compress: true },
  'image/png': { extension: 'png', compress: false },
  'image/svg+xml': { extension: 'svg', compress: true },
  'image/x-icon': { extension: 'ico', compress: true },
};

const brotli = promisify(brotliCompress);
const gzipped = promisify(gzip);

async function compress(body: Buffer, type: string): Promise<Partial<Record<Encoding, Buffer>>> {
  if (!TYPES[type]?.compress) return {};
  // Brotli quality 9: 11 saves another 9 % on the 5 MB script but takes ~10 s of CPU instead of ~1 s.
  const mode = type.startsWith('text/') || type === 'image/svg+xml' ? zlib.BROTLI_MODE_TEXT : zlib.BROTLI_MODE_GENERIC;
  const [br, gz] = await Promise.all([
    brotli(body, {
      params: {
        [zlib.BROTLI_PARAM_QUALITY]: 9,
        [zlib.BROTLI_PARAM_SIZE_HINT]: body.length,
        [zlib.BROTLI_PARAM_MODE]: mode,
      },
    }),
    gzipped(body, { level: 9 }),
  ]);
  // A copy that saves little is not worth a client's CPU to unpack.
  const worth = (copy: Buffer) => copy.length < body.length * 0.95;
  return { ...(worth(br) ? { br } : {}), ...(worth(gz) ? { gzip: gz } : {}) };
}

function addAsset(byPath: Map<string, Asset>, name: string, type: string, content: string | Buffer): string {
  const body = Buffer.isBuffer(content) ? content : Buffer.from(content);
  const hash = createHash('sha256').update(body).digest('hex').slice(0, 16);
  const path = `${GRAPHIQL_ASSET_PREFIX}${name}.${hash}.${TYPES[type]!.extension}`;
  if (!byPath.has(path)) {
    const encoded = compress(body, type);
    // Awaited by each request for the asset; a failure there answers 500 and is logged.
    encoded.catch(() => undefined);
    byPath.set(path, { path, type, body, etag: `"${hash}"`, encoded });
  }
  return path;
}

/** `data:font/woff2;base64,…` → the MIME type and the bytes; undefined for a type we do not serve. */
function decodeDataUrl(url: string): { type: string; body: Buffer } | undefined {
  const match = /^data:([a-z]+\/[a-z0-9.+-]+);base64,([A-Za-z0-9+/=\s]+)$/i.exec(url);
  if (!match || !TYPES[match[1]!.toLowerCase()]) return undefined;
  return { type: match[1]!.toLowerCase(), body: Buffer.from(match[2]!, 'base64') };
}

/**
 * What runs around the bundle, as render-graphiql's inline script did: Monaco's
 * environment first (its workers, now files of their own), then GraphiQL,
 * mounted with the options the page carries as JSON (no inline script).
 */
const BEFORE_BUNDLE = `(() => {
  const config = JSON.parse(document.getElementById('graphiql-config').textContent);
  self.MonacoEnvironment = { globalAPI: false, getWorkerUrl: (moduleId, label) => config.workers[label] };
  // The example booking's key is new on each load. GraphiQL restores the tabs of earlier visits
  // (and the query in the URL) over the default query, so their copies of the key are renewed too:
  // running Book after a reload books again instead of answering with the first booking.
  const key = new RegExp('${BOOK_KEY_PATTERN}', 'g');
  const fresh = (config.options.defaultQuery || '').match(key)?.[0];
  if (!fresh) return;
  try {
    for (const name of ['graphiql:tabState', 'graphiql:query']) {
      const stored = localStorage.getItem(name);
      const renewed = stored?.replace(key, fresh);
      if (stored && renewed !== stored) localStorage.setItem(name, renewed);
    }
  } catch {
    // No storage (a private window may refuse it): nothing was kept either.
  }
  const url = new URL(location.href);
  const query = url.searchParams.get('query');
  if (query && query.replace(key, fresh) !== query) {
    url.searchParams.set('query', query.replace(key, fresh));
    history.replaceState(history.state, '', url);
  }
})();
`;

const AFTER_BUNDLE = `
;(() => {
  const config = JSON.parse(document.getElementById('graphiql-config').textContent);
  YogaGraphiQL.renderYogaGraphiQL(document.getElementById('root'), config.options);
})();
`;

async function buildAssets(): Promise<Assets> {
  // Loaded on the first request only: 9 MB of strings that production (GraphiQL off) never needs.
  const bundled = await import('@graphql-yoga/render-graphiql/graphiql');
  const byPath = new Map<string, Asset>();
  const dataUrls = new Map<string, string>();
  const stylesheetText = bundled.css.replace(
    /url\((["']?)(data:[^"')]*)\1\)/g,
    (whole, _quote: string, url: string) => {
      const decoded = decodeDataUrl(url);
      if (!decoded) return whole;
      let path = dataUrls.get(url);
      if (!path) {
        path = addAsset(byPath, decoded.type.startsWith('font/') ? 'font' : 'image', decoded.type, decoded.body);
        dataUrls.set(url, path);
      }
      return `url(${path})`;
    },
  );
  const favicon = decodeDataUrl(bundled.favicon);
  return {
    byPath,
    script: addAsset(
      byPath,
      'graphiql',
      'text/javascript; charset=utf-8',
      `${BEFORE_BUNDLE}${bundled.js}${AFTER_BUNDLE}`,
    ),
    stylesheet: addAsset(byPath, 'graphiql', 'text/css; charset=utf-8', stylesheetText),
    favicon: favicon ? addAsset(byPath, 'favicon', favicon.type, favicon.body) : 'data:,',
    workers: {
      editorWorkerService: addAsset(
        byPath,
        'editor.worker',
        'text/javascript; charset=utf-8',
        bundled.editorWorkerService,
      ),
      json: addAsset(byPath, 'json.worker', 'text/javascript; charset=utf-8', bundled.jsonWorker),
      graphql: addAsset(byPath, 'graphql.worker', 'text/javascript; charset=utf-8', bundled.graphqlWorker),
    },
  };
}

// One copy per process: the assets depend only on the installed package, whatever the app's config.
let built: Promise<Assets> | undefined;
function loadAssets(): Promise<Assets> {
  built ??= buildAssets().catch((error: unknown) => {
    built = undefined; // try again on the next request
    throw error;
  });
  return built;
}

// ---------------------------------------------------------------- the page

function escapeHtml(value: string): string {
  return value.replace(/&/g, '&amp;').replace(/"/g, '&quot;').replace(/</g, '&lt;').replace(/>/g, '&gt;');
}

/** JSON that cannot end the <script> element holding it. */
function scriptJson(value: unknown): string {
  return JSON.stringify(value)
    .replace(/</g, '\\u003c')
    .replace(/>/g, '\\u003e')
    .replace(/&/g, '\\u0026')
    .replace(/\u2028/g, '\\u2028')
    .replace(/\u2029/g, '\\u2029');
}

/** yoga's `renderGraphiQL`: the page for these options, pointing at the asset files. */
export async function renderGraphiQLPage(options: GraphiQLOptions): Promise<string> {
  const assets = await loadAssets();
  const config = { workers: assets.workers, options };
  return `<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>${escapeHtml(options.title || 'Yoga GraphiQL')}</title>
<link rel="icon" href="${escapeHtml(options.favicon || assets.favicon)}">
<link rel="stylesheet" href="${assets.stylesheet}">
<script id="graphiql-config" type="application/json">${scriptJson(config)}</script>
<script src="${assets.script}" defer></script>
</head>
<body id="body" class="no-focus-outline">
<noscript>You need to enable JavaScript to run GraphiQL.</noscript>
<div id="root"></div>
</body>
</html>
`;
}

/** Encodings the client takes, best first: brotli, then gzip (q=0 refuses one; `*` takes both). */
function preferredEncodings(header: string | string[] | undefined): Encoding[] {
  const weights = new Map<string, number>();
  for (const part of String(header ?? '').split(',')) {
    const [name, ...params] = part.trim().toLowerCase().split(';');
    if (!name) continue;
    const q = params.map((p) => p.trim()).find((p) => p.startsWith('q='));
    weights.set(name, q === undefined ? 1 : Number(q.slice(2)) || 0);
  }
  const accepts = (encoding: Encoding) => (weights.get(encoding) ?? weights.get('*') ?? 0) > 0;
  return (['br', 'gzip'] as const).filter(accepts);
}

function matches(ifNoneMatch: string | undefined, etag: string): boolean {
  if (!ifNoneMatch) return false;
  return ifNoneMatch.split(',').some((tag) => {
    const trimmed = tag.trim();
    return trimmed === '*' || trimmed.replace(/^W\//, '') === etag;
  });
}

export function createGraphiQL(options: GraphiQLPageOptions): GraphiQLPage {
  const pageOptions = (): GraphiQLOptions => ({
    title: 'delivery-graph',
    headers: JSON.stringify({ Authorization: `Bearer ${options.sandboxKey ?? '<merchant key>'}` }, null, 2),
    defaultQuery: graphiqlExamples(),
  });

  const failed = (res: ServerResponse, error: unknown) => {
    options.logger.error({ err: error }, 'GraphiQL could not be served');
    if (!res.headersSent) res.writeHead(500, { 'content-type': 'text/plain; charset=utf-8' });
    res.end('GraphiQL could not be served; see the server log.\n');
  };

  const sendPage = (req: IncomingMessage, res: ServerResponse) => {
    renderGraphiQLPage(pageOptions()).then(
      (html) => {
        const body = Buffer.from(html);
        // A new page each time (the example's key), so nothing to revalidate: no-cache and no ETag.
        res.writeHead(200, {
          'content-type': 'text/html; charset=utf-8',
          'cache-control': 'no-cache',
          'content-length': body.length,
          ...SECURITY_HEADERS,
        });
        res.end(req.method === 'HEAD' ? undefined : body);
      },
      (error: unknown) => failed(res, error),
    );
  };

  const sendAsset = (req: IncomingMessage, res: ServerResponse, asset: Asset) => {
    asset.encoded.then(
      (encoded) => {
        const encoding = preferredEncodings(req.headers['accept-encoding']).find((name) => encoded[name]);
        const body = encoding ? encoded[encoding]! : asset.body;
        // One ETag per representation: a compressed copy is not the same bytes as the file.
        const etag = encoding ? `${asset.etag.slice(0, -1)}-${encoding}"` : asset.etag;
        const headers: Record<string, string | number> = {
          'content-type': asset.type,
          etag,
          'cache-control': IMMUTABLE,
          ...SECURITY_HEADERS,
        };
        if (TYPES[asset.type]?.compress) headers.vary = 'accept-encoding';
        if (encoding) headers['content-encoding'] = encoding;
        if (matches(req.headers['if-none-match'], etag)) return void res.writeHead(304, headers).end();
        res.writeHead(200, { ...headers, 'content-length': body.length });
        res.end(req.method === 'HEAD' ? undefined : body);
      },
      (error: unknown) => failed(res, error),
    );
  };

  return {
    options: pageOptions,
    handle(req, res, pathname) {
      const isAsset = pathname.startsWith(GRAPHIQL_ASSET_PREFIX);
      // The same test as yoga's: a browser asking the GraphQL endpoint for a page.
      const isPage =
        pathname === options.graphqlPath &&
        (req.method === 'GET' || req.method === 'HEAD') &&
        Boolean(req.headers.accept?.includes('text/html'));
      if (isPage) {
        sendPage(req, res);
        return true;
      }
      if (!isAsset) return false;
      if (req.method !== 'GET' && req.method !== 'HEAD') {
        res
          .writeHead(405, { allow: 'GET, HEAD', 'content-type': 'application/json' })
          .end(JSON.stringify({ error: 'method_not_allowed', message: `${pathname} answers GET and HEAD only.` }));
        return true;
      }
      loadAssets().then(
        (assets) => {
          const asset = assets.byPath.get(pathname);
          if (asset) return sendAsset(req, res, asset);
          // An old name (an earlier version of the package) or a typo: the files are named by content.
          res.writeHead(404, { 'content-type': 'application/json' }).end(
            JSON.stringify({
              error: 'not_found',
              message: `Nothing at ${pathname}. GraphiQL is at ${options.graphqlPath}.`,
            }),
          );
        },
        (error: unknown) => failed(res, error),
      );
      return true;
    },
  };
}

// CORS for every HTTP answer the process gives, applied once at the front door
// (app.ts) before any path is chosen: the direct JSON path, yoga's handler, SSE,
// probes, the page and every 4xx refusal carry the same headers. Credentials are
// never allowed: the merchant key travels in an Authorization header, not a cookie.
import type { IncomingMessage, ServerResponse } from 'node:http';

/** `*` (any origin) or the exact origins a browser may call from. */
export type CorsOrigins = '*' | ReadonlySet<string>;

/** Headers a page may read from an answer besides the CORS-safelisted ones. */
const EXPOSED_HEADERS = 'x-request-id, retry-after';
/** How long a browser may reuse a preflight answer (Chromium caps it at 7200). */
const PREFLIGHT_MAX_AGE_SECONDS = '7200';
/** A header list as browsers send it in Access-Control-Request-Headers. */
const HEADER_LIST = /^[A-Za-z0-9!#$%&'*+.^_`|~-]+(\s*,\s*[A-Za-z0-9!#$%&'*+.^_`|~-]+)*$/;

/** `https://Shop.Example:443/` → `https://shop.example`: the form a browser sends in Origin. */
export function normalizeOrigin(raw: string): string | undefined {
  let url: URL;
  try {
    url = new URL(raw);
  } catch {
    return undefined;
  }
  if (url.protocol !== 'http:' && url.protocol !== 'https:') return undefined;
  if (url.username || url.password || url.search || url.hash || (url.pathname !== '/' && url.pathname !== ''))
    return undefined;
  return url.origin;
}

export interface Cors {
  /** Whether a browser page on `origin` may call this server. */
  allows(origin: string | undefined): boolean;
  /**
   * Sets the CORS headers of this answer (before anything writes its head), and
   * answers a preflight itself. True when the request was a preflight, now answered.
   */
  handle(req: IncomingMessage, res: ServerResponse): boolean;
}

export function createCors(origins: CorsOrigins): Cors {
  const allows = (origin: string | undefined) => origin !== undefined && (origins === '*' || origins.has(origin));
  return {
    allows,
    handle(req, res) {
      const origin = req.headers.origin;
      const allowed = allows(origin);
      if (allowed) {
        res.setHeader('access-control-allow-origin', origins === '*' ? '*' : origin!);
        res.setHeader('access-control-expose-headers', EXPOSED_HEADERS);
      }
      // The answer differs by Origin when only some origins are allowed: caches must keep them apart.
      if (origins !== '*') res.setHeader('vary', 'Origin');
      if (req.method !== 'OPTIONS') return false;
      // A preflight (or any OPTIONS): answered here, on every path; a refused origin gets no allow headers.
      res.setHeader('allow', 'GET, POST, OPTIONS');
      if (allowed && req.headers['access-control-request-method'] !== undefined) {
        res.setHeader('access-control-allow-methods', 'GET, POST, OPTIONS');
        const asked = req.headers['access-control-request-headers'];
        // Any header the page asks for may be sent: without credentials, a header grants nothing by itself.
        if (asked && HEADER_LIST.test(asked)) res.setHeader('access-control-allow-headers', asked);
        res.setHeader('access-control-max-age', PREFLIGHT_MAX_AGE_SECONDS);
      }
      res.writeHead(204, { 'content-length': '0' }).end();
      return true;
    },
  };
}

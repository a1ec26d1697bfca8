// The sandbox's HTTP front: /api/v1 (both upstream groups, with the latency and
// error knobs and bearer-key auth), /sandbox (control routes for demos and
// tests), and the public tracking page.
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import { setTimeout as sleep } from 'node:timers/promises';
import type { JsonObject } from './wire.js';
import { handleControl, type Page } from './control-routes.js';
import { bearerToken, decodeSegment, escapeHtml, parseJson, readBody, splitPath } from './http-util.js';
import { PARTNER_ROOTS, PARTNER_ROUTES } from './partner-routes.js';
import { PLATFORM_ROUTES } from './platform-routes.js';
import { toPlatformDelivery } from './representations.js';
import { errorBody, matchRoute, type ApiResult, type ServerDeps } from './routing.js';
import type { Group, SandboxState } from './state.js';
import { isPlainObject } from './validation.js';
import type { SandboxMerchant, SandboxRequestRecord } from './types.js';

const API_PREFIX = '/api/v1';

type RecordGroup = SandboxRequestRecord['group'];

export function createSandboxServer(deps: ServerDeps): Server {
  return createServer((req, res) => {
    handle(deps, req, res).catch(() => {
      if (!res.headersSent && !res.destroyed) {
        res.writeHead(500, { 'content-type': 'application/json' }).end('{"message":"internal sandbox error"}');
      }
    });
  });
}

async function handle(deps: ServerDeps, req: IncomingMessage, res: ServerResponse): Promise<void> {
  const at = Date.now();
  const method = req.method ?? 'GET';
  const path = new URL(req.url ?? '/', 'http://sandbox').pathname;
  const record = (group: RecordGroup, status: number) => deps.requests.add({ method, path, group, status, at });

  if (path === API_PREFIX || path.startsWith(`${API_PREFIX}/`)) {
    const segments = splitPath(path.slice(API_PREFIX.length));
    // The partner group sits directly under /api/v1; any other first segment is a platform id.
    const group: Group =
      segments === null || segments.length === 0 || PARTNER_ROOTS.has(segments[0]!) ? 'partner' : 'platform';
    const result = await handleApi(deps, req, group, method, segments);
    if (result === null) return; // stopped mid-wait: the socket is going away
    record(group, result.status);
    sendJson(res, result, result.status === 413 ? { connection: 'close' } : {});
    return;
  }

  const page = path.startsWith('/sandbox/')
    ? await handleControl(deps, req, method, path)
    : handleTrackingPage(deps, method, path);
  record('control', page.status);
  res.writeHead(page.status, { 'content-type': page.contentType, 'cache-control': 'no-store' }).end(page.body);
}

// ---------------------------------------------------------------------------
// /api/v1

async function handleApi(
  deps: ServerDeps,
  req: IncomingMessage,
  group: Group,
  method: string,
  segments: string[] | null,
): Promise<ApiResult | null> {
  const body = await readBody(req);

  // Latency and injected failures apply to the upstream API only, never to /sandbox.
  if (deps.knobs.latencyMs > 0) {
    try {
      await sleep(deps.knobs.latencyMs, undefined, { signal: deps.lifetime });
    } catch {
      return null;
    }
  }
  if (deps.knobs.errorRate > 0 && Math.random() < deps.knobs.errorRate) {
    return { status: 503, body: errorBody(group, 'unavailable', 'The service is temporarily unavailable.') };
  }

  if (segments === null) return { status: 404, body: errorBody(group, 'not_found', 'Route not found.') };
  const platformId = group === 'platform' ? segments[0]! : null;
  const match = matchRoute(
    group === 'platform' ? PLATFORM_ROUTES : PARTNER_ROUTES,
    method,
    group === 'platform' ? segments.slice(1) : segments,
  );
  if (match === null) return { status: 404, body: errorBody(group, 'not_found', 'Route not found.') };
  if ('allowed' in match)
    return { status: 405, body: errorBody(group, 'method_not_allowed', `Use ${match.allowed.join(', ')}.`) };

  const auth = authenticate(deps.state, req.headers.authorization, platformId);
  if ('message' in auth) return { status: 401, body: errorBody(group, 'invalid_api_key', auth.message) };

  let json: JsonObject = {};
  if (match.route.json) {
    if (body === 'too_large')
      return { status: 413, body: errorBody(group, 'payload_too_large', 'The request body exceeds 1 MiB.') };
    const parsed = parseJson(body);
    if (!isPlainObject(parsed))
      return { status: 400, body: errorBody(group, 'bad_request', 'The request body must be a JSON object.') };
    json = parsed;
  }
  const result = match.route.handle({
    group,
    merchant: auth.merchant,
    params: match.params,
    body: json,
    state: deps.state,
    lifecycle: deps.lifecycle,
  });
  // A booking made, its answer late (createAnswerDelayMs): the document promises no answer time.
  if (
    group === 'platform' &&
    method === 'POST' &&
    match.route.path.join('/') === 'deliveries' &&
    result.status < 300 &&
    deps.knobs.createAnswerDelayMs > 0
  ) {
    try {
      await sleep(deps.knobs.createAnswerDelayMs, undefined, { signal: deps.lifetime });
    } catch {
      return null;
    }
  }
  return result;
}

/**
 * `Authorization: Bearer <key>`. On the platform group the key's merchant must
 * belong to the platform in the path; an unknown platform id fails the same way.
 * Messages never echo the key.
 */
function authenticate(
  state: SandboxState,
  header: string | undefined,
  platformId: string | null,
): { merchant: SandboxMerchant } | { message: string } {
  const key = bearerToken(header);
  if (key === null) return { message: 'Missing API key: send Authorization: Bearer <key>.' };
  const merchant = state.merchantByKey(key);
  if (!merchant) return { message: 'The API key is invalid.' };
  if (state.revokedKeys.has(key)) return { message: 'The API key has been revoked.' };
  if (platformId !== null && merchant.platformId !== platformId)
    return { message: 'The API key is not valid for this platform.' };
  return { merchant };
}

// ---------------------------------------------------------------------------
// The tracking page

/** The public, login-free tracking page the `tracking_link` points at. */
function handleTrackingPage(deps: ServerDeps, method: string, path: string): Page {
  const match = /^\/track\/([^/]+)$/.exec(path);
  const record = method === 'GET' && match ? deps.state.deliveries.get(decodeSegment(match[1]!) ?? '') : undefined;
  if (!record)
    return {
      status: 404,
      contentType: 'text/html; charset=utf-8',
      body: '<!doctype html><title>Not found</title><p>No such delivery.</p>',
    };
  const d = toPlatformDelivery(record, deps.state.origin, deps.state.deliveryMinuteOfDay);
  const rows: [string, unknown][] = [
    ['Status', d.status],
    ['Courier', d.driver_name ?? 'not assigned yet'],
    ['Vehicle', d.driver_vehicle_make ? `${d.driver_vehicle_make} ${d.driver_vehicle_model}` : '—'],
    ['Position', d.driver_location ? `${d.driver_location.lat}, ${d.driver_location.lng}` : '—'],
    ['Estimated arrival', d.dropoff_time_estimated],
  ];
  const body = `<!doctype html><meta charset="utf-8"><meta http-equiv="refresh" content="3"><title>Delivery ${escapeHtml(record.uid)}</title>
<h1>Delivery to ${escapeHtml(String(d.dropoff_name))}</h1>
<table>${rows.map(([k, v]) => `<tr><th>${k}</th><td>${escapeHtml(String(v))}</td></tr>`).join('')}</table>`;
  return { status: 200, contentType: 'text/html; charset=utf-8', body };
}

// ---------------------------------------------------------------------------
// Plumbing

function sendJson(res: ServerResponse, result: ApiResult, headers: Record<string, string>): void {
  if (res.destroyed) return;
  res.writeHead(result.status, { 'content-type': 'application/json', ...headers }).end(JSON.stringify(result.body));
}

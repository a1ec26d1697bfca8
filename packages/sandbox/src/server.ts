// The sandbox's HTTP front: /api/v1 (both upstream groups, with the latency and
// error knobs and bearer-key auth), /sandbox (control routes for demos and
// tests), and the public tracking page.
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import { setTimeout as sleep } from 'node:timers/promises';
import type { JsonObject } from './wire.js';
import { LifecycleError, type LifecycleSimulator } from './lifecycle.js';
import type { RequestLog } from './request-log.js';
import { PARTNER_ROOTS, PARTNER_ROUTES, seedOrder } from './partner-routes.js';
import { PLATFORM_ROUTES } from './platform-routes.js';
import { toPlatformDelivery } from './representations.js';
import { errorBody, matchRoute, type ApiResult } from './routing.js';
import { readStatus, type Group, type SandboxState } from './state.js';
import { isPlainObject } from './validation.js';
import type { DeliveryHistory, SandboxKnobs, SandboxMerchant, SandboxRequestRecord, Selector } from './types.js';
import { selectorListProblems } from './webhook-script.js';

const API_PREFIX = '/api/v1';
const MAX_BODY_BYTES = 1024 * 1024;

export interface ServerDeps {
  state: SandboxState;
  /** Another key of the merchant holding `key`; undefined for a key the sandbox does not know. */
  addMerchantKey(key: string): string | undefined;
  lifecycle: LifecycleSimulator;
  knobs: SandboxKnobs;
  requests: RequestLog;
  publicKeyPem: string;
  /** Aborted by stop(): cuts short any latency wait still running. */
  lifetime: AbortSignal;
  info(): JsonObject;
  setKnobs(patch: unknown): void;
  setWebhookUrl(url: string | undefined): void;
  revokeKey(key: string): void;
  history(uid: string): DeliveryHistory | undefined;
  /** How many finished deliveries' histories are kept: named when one is no longer. */
  historySize: number;
  releaseWebhooks(uid: string, selectors?: readonly Selector[]): Promise<number[]>;
}

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

function bearerToken(header: string | undefined): string | null {
  const match = /^Bearer\s+(\S+)\s*$/i.exec(header ?? '');
  return match ? match[1]! : null;
}

// ---------------------------------------------------------------------------
// /sandbox control routes and the tracking page

interface Page {
  status: number;
  contentType: string;
  body: string;
}

const jsonPage = (status: number, body: unknown): Page => ({
  status,
  contentType: 'application/json',
  body: JSON.stringify(body),
});
const controlError = (status: number, error: string, message: string) => jsonPage(status, { error, message });

async function handleControl(deps: ServerDeps, req: IncomingMessage, method: string, path: string): Promise<Page> {
  if (method === 'GET' && path === '/sandbox/public-key.pem') {
    return { status: 200, contentType: 'application/x-pem-file', body: deps.publicKeyPem };
  }
  if (method === 'GET' && path === '/sandbox/info') return jsonPage(200, deps.info());

  if (method === 'POST' && path === '/sandbox/knobs') {
    try {
      deps.setKnobs(parseJson(await readBody(req)) ?? null);
    } catch (error) {
      return controlError(400, 'invalid_knobs', (error as Error).message);
    }
    return jsonPage(200, { knobs: deps.knobs });
  }

  // Where webhooks go, changed while it runs: {"url": "http://…"}, or {"url": null} for nowhere (polling only).
  if (method === 'PUT' && path === '/sandbox/webhook-url') {
    const body = parseJson(await readBody(req));
    const url = isPlainObject(body) ? body.url : undefined;
    if (url !== null && !(typeof url === 'string' && isHttpUrl(url))) {
      return controlError(
        400,
        'bad_request',
        'Send {"url": "<absolute http or https URL>"}, or {"url": null} to send no webhooks.',
      );
    }
    deps.setWebhookUrl(url ?? undefined);
    return jsonPage(200, { webhookUrl: url });
  }

  const advance = /^\/sandbox\/deliveries\/([^/]+)\/advance$/.exec(path);
  if (method === 'POST' && advance) {
    const uid = decodeSegment(advance[1]!) ?? '';
    try {
      await deps.lifecycle.advance(uid);
    } catch (error) {
      if (!(error instanceof LifecycleError)) throw error;
      return controlError(error.code === 'not_found' ? 404 : 409, error.code, error.message);
    }
    return jsonPage(200, { uid, status: readStatus(deps.state.deliveries.get(uid)!) });
  }

  const history = /^\/sandbox\/deliveries\/([^/]+)\/history$/.exec(path);
  if (method === 'GET' && history) {
    const uid = decodeSegment(history[1]!) ?? '';
    const found = deps.history(uid);
    if (found) return jsonPage(200, found);
    if (deps.state.deliveries.has(uid)) {
      return controlError(
        410,
        'history_not_kept',
        `The webhook history of ${uid} is no longer kept: the sandbox keeps those of the ${deps.historySize} deliveries that finished last (webhookHistorySize).`,
      );
    }
    return controlError(404, 'not_found', `No delivery ${uid}.`);
  }

  // Sends what a delivery's script kept back; answers once the receiver has acknowledged it.
  const release = /^\/sandbox\/deliveries\/([^/]+)\/webhooks\/release$/.exec(path);
  if (method === 'POST' && release) {
    const uid = decodeSegment(release[1]!) ?? '';
    const text = await readBody(req);
    const body = text === '' ? {} : parseJson(text);
    if (!isPlainObject(body))
      return controlError(
        400,
        'bad_request',
        'The request body must be empty or a JSON object {"events": [selectors]}.',
      );
    const events = body.events;
    const problems = events === undefined ? [] : selectorListProblems(events, 'events');
    if (problems.length > 0) return controlError(400, 'bad_request', problems.join(' '));
    if (!deps.state.deliveries.has(uid)) return controlError(404, 'not_found', `No delivery ${uid}.`);
    const released = await deps.releaseWebhooks(uid, events as Selector[] | undefined);
    return jsonPage(200, { uid, released });
  }

  const reassign = /^\/sandbox\/deliveries\/([^/]+)\/reassign$/.exec(path);
  if (method === 'POST' && reassign) {
    const uid = decodeSegment(reassign[1]!) ?? '';
    try {
      deps.lifecycle.reassign(uid);
    } catch (error) {
      if (!(error instanceof LifecycleError)) throw error;
      return controlError(error.code === 'not_found' ? 404 : 409, error.code, error.message);
    }
    const courier = deps.state.deliveries.get(uid)!.courier!;
    return jsonPage(200, { uid, driver_id: courier.id, driver_name: courier.name });
  }
  // The key travels as the bearer token, as on /api/v1, never in the path (paths get logged).
  if (method === 'POST' && path === '/sandbox/revoke-key') {
    const key = bearerToken(req.headers.authorization);
    if (key === null || !deps.state.merchantByKey(key))
      return controlError(
        404,
        'not_found',
        'Send the key to revoke as Authorization: Bearer <key>; it must be a sandbox merchant key.',
      );
    deps.revokeKey(key);
    return jsonPage(200, { revoked: true });
  }

  // A merchant rotating its key: a new one for the same merchant, both accepted until one is revoked.
  if (method === 'POST' && path === '/sandbox/merchant-keys') {
    const key = bearerToken(req.headers.authorization);
    const added = key === null ? undefined : deps.addMerchantKey(key);
    if (added === undefined)
      return controlError(
        404,
        'not_found',
        'Send a key of the merchant as Authorization: Bearer <key>; it must be a sandbox merchant key.',
      );
    return jsonPage(201, { key: added });
  }

  if (method === 'POST' && path === '/sandbox/orders') {
    const key = bearerToken(req.headers.authorization);
    if (key === null) return controlError(401, 'invalid_api_key', 'Missing API key: send Authorization: Bearer <key>.');
    const body = parseJson(await readBody(req));
    if (!isPlainObject(body)) return controlError(400, 'bad_request', 'The request body must be a JSON object.');
    const outcome = seedOrder(deps.state, deps.lifecycle, key, body);
    if (outcome.ok) return jsonPage(201, { data: outcome.order });
    const status = { invalid_api_key: 401, validation_error: 422, duplicate_reference: 409 }[outcome.reason];
    return controlError(status, outcome.reason, outcome.message);
  }

  const proof = /^\/sandbox\/proofs\/[^/]+\/(photo|signature)\.svg$/.exec(path);
  if (method === 'GET' && proof) {
    return {
      status: 200,
      contentType: 'image/svg+xml',
      body: proofSvg(proof[1] === 'photo' ? 'Proof of delivery' : 'Signed: recipient'),
    };
  }
  return controlError(404, 'not_found', 'Unknown sandbox route.');
}

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

function proofSvg(text: string): string {
  return `<svg xmlns="http://www.w3.org/2000/svg" width="320" height="120"><rect width="100%" height="100%" fill="#eee"/><text x="20" y="65" font-family="sans-serif" font-size="20">${escapeHtml(text)}</text></svg>`;
}

function escapeHtml(text: string): string {
  return text.replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`);
}

// ---------------------------------------------------------------------------
// Plumbing

/** Path segments, URL-decoded; null when a segment is not valid percent-encoding. */
function splitPath(path: string): string[] | null {
  const segments = path
    .split('/')
    .filter((s) => s !== '')
    .map(decodeSegment);
  return segments.every((s): s is string => s !== null) ? segments : null;
}

function isHttpUrl(text: string): boolean {
  return URL.canParse(text) && ['http:', 'https:'].includes(new URL(text).protocol);
}

function decodeSegment(segment: string): string | null {
  try {
    return decodeURIComponent(segment);
  } catch {
    return null;
  }
}

/** The whole request body as text, or 'too_large' past 1 MiB (the rest is discarded). */
async function readBody(req: IncomingMessage): Promise<string | 'too_large'> {
  const chunks: Buffer[] = [];
  let size = 0;
  let tooLarge = false;
  for await (const chunk of req as AsyncIterable<Buffer>) {
    size += chunk.length;
    if (size > MAX_BODY_BYTES) tooLarge = true;
    else chunks.push(chunk);
  }
  return tooLarge ? 'too_large' : Buffer.concat(chunks).toString('utf8');
}

function parseJson(body: string): unknown {
  if (body === 'too_large') return undefined;
  try {
    return JSON.parse(body);
  } catch {
    return undefined;
  }
}

function sendJson(res: ServerResponse, result: ApiResult, headers: Record<string, string>): void {
  if (res.destroyed) return;
  res.writeHead(result.status, { 'content-type': 'application/json', ...headers }).end(JSON.stringify(result.body));
}

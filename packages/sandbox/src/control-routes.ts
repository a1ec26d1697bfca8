// The /sandbox control routes, for demos and tests: knobs, where webhooks go,
// moving a delivery along, releasing its webhooks, keys, seeded orders. Each
// route says whether it is public (the signing key, proof images), and whether it
// changes the sandbox or shows its secrets, which production refuses.
import type { IncomingMessage } from 'node:http';
import { CONTROL_TOKEN_HEADER, tokenMatches } from './control-access.js';
import { bearerToken, decodeSegment, escapeHtml, isHttpUrl, parseJson, readBody } from './http-util.js';
import { LifecycleError } from './lifecycle.js';
import { seedOrder } from './partner-routes.js';
import type { ServerDeps } from './routing.js';
import { readStatus } from './state.js';
import type { Selector } from './types.js';
import { isPlainObject } from './validation.js';
import { selectorListProblems } from './webhook-script.js';

export interface Page {
  status: number;
  contentType: string;
  body: string;
}

export const jsonPage = (status: number, body: unknown): Page => ({
  status,
  contentType: 'application/json',
  body: JSON.stringify(body),
});
const controlError = (status: number, error: string, message: string) => jsonPage(status, { error, message });

interface ControlRequest {
  deps: ServerDeps;
  req: IncomingMessage;
  /** The route's one capture: a uid, or the proof's kind. */
  param: string;
}

interface ControlRoute {
  method: 'GET' | 'POST' | 'PUT';
  path: RegExp;
  /** Anyone may read it, token or not: what the upstream publishes (its key, the proof images deliveries link to). */
  public?: boolean;
  /** Production refuses it: it changes the sandbox, or shows what only its operator may see (the merchant keys). */
  guarded?: boolean;
  handle(request: ControlRequest): Promise<Page> | Page;
}

const CONTROL_ROUTES: readonly ControlRoute[] = [
  {
    method: 'GET',
    path: /^\/sandbox\/public-key\.pem$/,
    public: true,
    handle: ({ deps }) => ({ status: 200, contentType: 'application/x-pem-file', body: deps.publicKeyPem }),
  },
  {
    method: 'GET',
    path: /^\/sandbox\/proofs\/[^/]+\/(photo|signature)\.svg$/,
    public: true,
    handle: ({ param }) => ({
      status: 200,
      contentType: 'image/svg+xml',
      body: proofSvg(param === 'photo' ? 'Proof of delivery' : 'Signed: recipient'),
    }),
  },
  { method: 'GET', path: /^\/sandbox\/info$/, guarded: true, handle: ({ deps }) => jsonPage(200, deps.info()) },
  { method: 'POST', path: /^\/sandbox\/knobs$/, guarded: true, handle: setKnobs },
  { method: 'PUT', path: /^\/sandbox\/webhook-url$/, guarded: true, handle: setWebhookUrl },
  { method: 'POST', path: /^\/sandbox\/deliveries\/([^/]+)\/advance$/, guarded: true, handle: advance },
  { method: 'GET', path: /^\/sandbox\/deliveries\/([^/]+)\/history$/, handle: history },
  { method: 'POST', path: /^\/sandbox\/deliveries\/([^/]+)\/webhooks\/release$/, guarded: true, handle: release },
  { method: 'POST', path: /^\/sandbox\/deliveries\/([^/]+)\/reassign$/, guarded: true, handle: reassign },
  { method: 'POST', path: /^\/sandbox\/revoke-key$/, guarded: true, handle: revokeKey },
  { method: 'POST', path: /^\/sandbox\/merchant-keys$/, guarded: true, handle: addMerchantKey },
  { method: 'POST', path: /^\/sandbox\/orders$/, guarded: true, handle: seedPartnerOrder },
];

export async function handleControl(
  deps: ServerDeps,
  req: IncomingMessage,
  method: string,
  path: string,
): Promise<Page> {
  for (const route of CONTROL_ROUTES) {
    const match = route.method === method ? route.path.exec(path) : null;
    if (!match) continue;
    const refused = route.public ? undefined : refusal(deps, req, route);
    if (refused) return refused;
    return route.handle({ deps, req, param: match[1] === undefined ? '' : (decodeSegment(match[1]) ?? '') });
  }
  return controlError(404, 'not_found', 'Unknown sandbox route.');
}

/** Production first: there no token opens a guarded route. The token is never echoed. */
function refusal(deps: ServerDeps, req: IncomingMessage, route: ControlRoute): Page | undefined {
  if (deps.control.production && route.guarded)
    return controlError(
      403,
      'refused_in_production',
      'In production the sandbox control routes change nothing and do not show its merchant keys: the upstream is a simulator there, and these routes are for demos and tests.',
    );
  if (deps.control.token !== undefined && !tokenMatches(deps.control.token, req.headers[CONTROL_TOKEN_HEADER]))
    return controlError(
      401,
      'control_token_required',
      `The sandbox control routes need the control token, sent as the ${CONTROL_TOKEN_HEADER} header.`,
    );
  return undefined;
}

async function setKnobs({ deps, req }: ControlRequest): Promise<Page> {
  try {
    deps.setKnobs(parseJson(await readBody(req)) ?? null);
  } catch (error) {
    return controlError(400, 'invalid_knobs', (error as Error).message);
  }
  return jsonPage(200, { knobs: deps.knobs });
}

/** Where webhooks go, changed while it runs: {"url": "http://…"}, or {"url": null} for nowhere (polling only). */
async function setWebhookUrl({ deps, req }: ControlRequest): Promise<Page> {
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

async function advance({ deps, param: uid }: ControlRequest): Promise<Page> {
  try {
    await deps.lifecycle.advance(uid);
  } catch (error) {
    if (!(error instanceof LifecycleError)) throw error;
    return controlError(error.code === 'not_found' ? 404 : 409, error.code, error.message);
  }
  return jsonPage(200, { uid, status: readStatus(deps.state.deliveries.get(uid)!) });
}

function history({ deps, param: uid }: ControlRequest): Page {
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

/** Sends what a delivery's script kept back; answers once the receiver has acknowledged it. */
async function release({ deps, req, param: uid }: ControlRequest): Promise<Page> {
  const text = await readBody(req);
  const body = text === '' ? {} : parseJson(text);
  if (!isPlainObject(body))
    return controlError(400, 'bad_request', 'The request body must be empty or a JSON object {"events": [selectors]}.');
  const events = body.events;
  const problems = events === undefined ? [] : selectorListProblems(events, 'events');
  if (problems.length > 0) return controlError(400, 'bad_request', problems.join(' '));
  if (!deps.state.deliveries.has(uid)) return controlError(404, 'not_found', `No delivery ${uid}.`);
  const released = await deps.releaseWebhooks(uid, events as Selector[] | undefined);
  return jsonPage(200, { uid, released });
}

function reassign({ deps, param: uid }: ControlRequest): Page {
  try {
    deps.lifecycle.reassign(uid);
  } catch (error) {
    if (!(error instanceof LifecycleError)) throw error;
    return controlError(error.code === 'not_found' ? 404 : 409, error.code, error.message);
  }
  const courier = deps.state.deliveries.get(uid)!.courier!;
  return jsonPage(200, { uid, driver_id: courier.id, driver_name: courier.name });
}

/** The key travels as the bearer token, as on /api/v1, never in the path (paths get logged). */
function revokeKey({ deps, req }: ControlRequest): Page {
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

/** A merchant rotating its key: a new one for the same merchant, both accepted until one is revoked. */
function addMerchantKey({ deps, req }: ControlRequest): Page {
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

async function seedPartnerOrder({ deps, req }: ControlRequest): Promise<Page> {
  const key = bearerToken(req.headers.authorization);
  if (key === null) return controlError(401, 'invalid_api_key', 'Missing API key: send Authorization: Bearer <key>.');
  const body = parseJson(await readBody(req));
  if (!isPlainObject(body)) return controlError(400, 'bad_request', 'The request body must be a JSON object.');
  const outcome = seedOrder(deps.state, deps.lifecycle, key, body);
  if (outcome.ok) return jsonPage(201, { data: outcome.order });
  const status = { invalid_api_key: 401, validation_error: 422, duplicate_reference: 409 }[outcome.reason];
  return controlError(status, outcome.reason, outcome.message);
}

function proofSvg(text: string): string {
  return `<svg xmlns="http://www.w3.org/2000/svg" width="320" height="120"><rect width="100%" height="100%" fill="#eee"/><text x="20" y="65" font-family="sans-serif" font-size="20">${escapeHtml(text)}</text></svg>`;
}

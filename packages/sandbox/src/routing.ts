// The small vocabulary the route tables and the server share: what the server is
// given, a route, what a handler sees, and each group's error shape.
import type { JsonObject } from './wire.js';
import type { LifecycleSimulator } from './lifecycle.js';
import type { RequestLog } from './request-log.js';
import type { Group, SandboxState } from './state.js';
import type { DeliveryHistory, SandboxKnobs, SandboxMerchant, Selector } from './types.js';

/** What the HTTP front is given by startSandbox. */
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
  /** Who may use the control routes: the token they need (when set), and whether they may change anything. */
  control: { token: string | undefined; production: boolean };
  info(): JsonObject;
  setKnobs(patch: unknown): void;
  setWebhookUrl(url: string | undefined): void;
  revokeKey(key: string): void;
  history(uid: string): DeliveryHistory | undefined;
  /** How many finished deliveries' histories are kept: named when one is no longer. */
  historySize: number;
  releaseWebhooks(uid: string, selectors?: readonly Selector[]): Promise<number[]>;
}

/** `service` of the availability result. */
export const SERVICE_NAME = 'lastmile';

export interface ApiResult {
  status: number;
  body: unknown;
}

/** What a handler gets once the route matched, the key was accepted and the body parsed. */
export interface ApiContext {
  group: Group;
  merchant: SandboxMerchant;
  params: Record<string, string>;
  /** The JSON object body for routes with `json: true`, else `{}`. */
  body: JsonObject;
  state: SandboxState;
  lifecycle: LifecycleSimulator;
}

export interface ApiRoute {
  method: 'GET' | 'POST';
  /** Segments after the group's base; `:name` captures one segment. */
  path: readonly string[];
  /** The route reads a JSON object body (malformed → 400). */
  json?: boolean;
  handle(ctx: ApiContext): ApiResult;
}

export type RouteMatch = { route: ApiRoute; params: Record<string, string> } | { allowed: string[] } | null;

/** Finds the route for a method and path; `{allowed}` when only the method is wrong. */
export function matchRoute(routes: readonly ApiRoute[], method: string, segments: readonly string[]): RouteMatch {
  const allowed: string[] = [];
  for (const route of routes) {
    const params = matchPath(route.path, segments);
    if (!params) continue;
    if (route.method === method) return { route, params };
    allowed.push(route.method);
  }
  return allowed.length > 0 ? { allowed } : null;
}

function matchPath(pattern: readonly string[], segments: readonly string[]): Record<string, string> | null {
  if (pattern.length !== segments.length) return null;
  const params: Record<string, string> = {};
  for (const [i, part] of pattern.entries()) {
    const segment = segments[i]!;
    if (part.startsWith(':')) params[part.slice(1)] = segment;
    else if (part !== segment) return null;
  }
  return params;
}

/** Platform errors are `{code, message}`; the partner group's are `{error, message}`. */
export function errorBody(
  group: Group,
  code: string,
  message: string,
): { code: string; message: string } | { error: string; message: string } {
  return group === 'platform' ? { code, message } : { error: code, message };
}

export function apiError(group: Group, status: number, code: string, message: string): ApiResult {
  return { status, body: errorBody(group, code, message) };
}

// Per-request identity for logs and metrics: the request id (an incoming
// x-request-id when it is a plain token, else a fresh UUID) and, for GraphQL,
// the operation that ran and the error codes it was answered with. The record rides on the IncomingMessage, so the
// GraphQL plugin can fill in the operation wherever the request was executed.
// When upstream calls are logged (debug) the id is also kept in an
// AsyncLocalStorage; otherwise none is entered, so the hot path pays nothing.
import { AsyncLocalStorage } from 'node:async_hooks';
import { randomUUID } from 'node:crypto';
import type { IncomingMessage } from 'node:http';

export interface RequestInfo {
  readonly id: string;
  operationType?: string;
  operationName?: string;
  /** The error codes the request was answered with (GraphQL errors, a webhook's refusal), for its access-log line. */
  errorCodes?: string[];
  /**
   * How a stream of server-sent events ended: `complete` (the server ended it), `error` (an error ended it: too slow a
   * reader), `closed` (the client went first).
   */
  result?: 'complete' | 'error' | 'closed';
}

/** Most distinct codes one access-log line names: a partial result may hold an error per uid. */
const MAX_LOGGED_CODES = 5;

/** Notes the codes of the errors a request is answered with, each once, for its access-log line. */
export function noteErrorCodes(
  info: Pick<RequestInfo, 'errorCodes'> | undefined,
  errors: ReadonlyArray<{ readonly extensions?: Readonly<Record<string, unknown>> }> | undefined,
): void {
  if (!info || !errors) return;
  for (const error of errors) {
    const code = error.extensions?.code;
    if (typeof code !== 'string') continue;
    info.errorCodes ??= [];
    if (!info.errorCodes.includes(code) && info.errorCodes.length < MAX_LOGGED_CODES) info.errorCodes.push(code);
  }
}

const INFO = Symbol('delivery-graph.request');

/** A request id we repeat in headers and logs: short, printable, no separators that could forge a log field. */
const SAFE_ID = /^[A-Za-z0-9._:@+/=-]{1,128}$/;

export function requestId(incoming: string | string[] | undefined): string {
  const value = Array.isArray(incoming) ? incoming[0] : incoming;
  return value !== undefined && SAFE_ID.test(value) ? value : randomUUID();
}

export function attachRequestInfo(req: IncomingMessage, info: RequestInfo): void {
  (req as IncomingMessage & { [INFO]?: RequestInfo })[INFO] = info;
}

export function requestInfoOf(req: unknown): RequestInfo | undefined {
  return (req as { [INFO]?: RequestInfo } | undefined)?.[INFO];
}

/** Entered only when something reads it (debug logs of upstream calls). */
export const requestScope = new AsyncLocalStorage<RequestInfo>();

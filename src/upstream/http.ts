// The one door to the upstream: an undici Pool for its origin (keep-alive, a
// connection cap), a time budget per call that covers headers, body and retries,
// a cap on the response size, and the classification of every failure into one
// typed error with a stable code. Only idempotent GETs are retried, and only
// identical GETs in flight together are shared. Every attempt is admitted and
// counted by the circuit breaker of its endpoint group.
import { Pool } from 'undici';
import {
  DEFAULT_BREAKER,
  GroupBreaker,
  type AttemptOutcome,
  type BreakerSettings,
  type BreakerState,
} from './breaker.js';
import type { KnownKeys } from './known-keys.js';
import { Exchange, ResponseTooLarge, type RawResponse } from './exchange.js';
import { callerAborted, Flight, SharedReads } from './shared-reads.js';
import { upstreamRefusal } from './refusal.js';
import {
  CancelRefusedError,
  DeliveryGraphError,
  NotCancelableError,
  NotFoundError,
  UnauthenticatedError,
  UpstreamProtocolError,
  UpstreamTimeoutError,
  UpstreamUnavailableError,
  UpstreamValidationError,
} from '../errors.js';

export type ApiGroupName = 'platform' | 'partner';

export interface UpstreamRequest {
  group: ApiGroupName;
  method: 'GET' | 'POST';
  /** Path below the base URL, e.g. "/p1/deliveries/abc". */
  path: string;
  /** The path with identifiers replaced, for logs and metrics, e.g. "/{platform}/deliveries/{uid}". */
  route: string;
  /** The caller's merchant key, forwarded unchanged as the bearer token; empty sends no Authorization header. */
  key: string;
  body?: unknown;
  /** A cancellation: a 409 answer to it means "not cancelable", whatever its body says. */
  cancel?: boolean;
  signal?: AbortSignal;
}

/** What the observer hears about each finished call (never the key or a body). */
export interface UpstreamCallRecord {
  group: ApiGroupName;
  method: string;
  route: string;
  status: number | undefined;
  /** "ok", or the code of the error the call ended with. */
  outcome: string;
  attempts: number;
  durationMs: number;
}

export interface UpstreamHttpOptions {
  /** Base URL ending in /api/v1. */
  baseUrl: string;
  timeoutMs: number;
  connections: number;
  maxResponseBytes: number;
  onCall?: (record: UpstreamCallRecord) => void;
  /** First retry gap; later ones double. Jittered ±50%. */
  retryBaseMs?: number;
  /** Circuit-breaker settings, the same for each endpoint group. */
  breaker?: BreakerSettings;
  /**
   * Learns what each answer says about the key it was sent with, and refuses to
   * send a key its group refused recently (UNAUTHENTICATED, no call).
   */
  keys?: KnownKeys;
}

export type BreakerStates = Record<ApiGroupName, BreakerState>;

const MAX_GET_RETRIES = 2;
const RETRYABLE_STATUS = new Set([502, 503, 504]);
const CONNECTION_ERROR_CODES = new Set([
  'ECONNREFUSED',
  'ECONNRESET',
  'EPIPE',
  'ENOTFOUND',
  'EAI_AGAIN',
  'EHOSTUNREACH',
  'ENETUNREACH',
  'ETIMEDOUT',
  'UND_ERR_SOCKET',
  'UND_ERR_CLOSED',
  'UND_ERR_CONNECT_TIMEOUT',
  'UND_ERR_RES_CONTENT_LENGTH_MISMATCH',
]);
/**
 * The connection could not be made, so the request never left: a POST failing so
 * booked nothing. A reset or a close may come after the request was sent, so they are not here.
 */
const CONNECT_ERROR_CODES = new Set([
  'ECONNREFUSED',
  'ENOTFOUND',
  'EAI_AGAIN',
  'EHOSTUNREACH',
  'ENETUNREACH',
  'UND_ERR_CONNECT_TIMEOUT',
]);
const TIMEOUT_ERROR_CODES = new Set(['UND_ERR_HEADERS_TIMEOUT', 'UND_ERR_BODY_TIMEOUT']);
/** What undici refuses in a header value (lib/core/util.js headerCharRegex). */
const NOT_A_HEADER_VALUE = /[^\t\x20-\x7e\x80-\xff]/;

interface Answer<T> {
  status: number;
  body: T;
}

/**
 * A failed attempt: the error the caller would see, whether a GET may try again
 * (and how long the upstream asked us to wait), and what the breaker judges it by.
 */
class AttemptFailure extends Error implements AttemptOutcome {
  readonly status: number | undefined;
  readonly retryable: boolean;
  readonly retryAfterMs: number | undefined;
  readonly unsent: boolean;
  readonly callerAborted: boolean;
  constructor(
    readonly error: DeliveryGraphError,
    details: {
      status?: number;
      retryable?: boolean;
      retryAfterMs?: number;
      unsent?: boolean;
      callerAborted?: boolean;
    } = {},
  ) {
    super(error.message);
    this.status = details.status;
    this.retryable = details.retryable ?? false;
    this.retryAfterMs = details.retryAfterMs;
    this.unsent = details.unsent ?? false;
    this.callerAborted = details.callerAborted ?? false;
  }
}

export class UpstreamHttp {
  readonly #pool: Pool;
  readonly #basePath: string;
  readonly #options: UpstreamHttpOptions;
  readonly #breakers: Record<ApiGroupName, GroupBreaker>;
  readonly #breakerListeners = new Set<(group: ApiGroupName, state: BreakerState) => void>();
  readonly #shared = new SharedReads();

  constructor(options: UpstreamHttpOptions) {
    const url = new URL(options.baseUrl);
    this.#basePath = url.pathname.replace(/\/+$/, '');
    this.#options = options;
    const settings = options.breaker ?? DEFAULT_BREAKER;
    const breaker = (group: ApiGroupName) =>
      new GroupBreaker(group, settings, (state) => {
        for (const listener of this.#breakerListeners) listener(group, state);
      });
    this.#breakers = { platform: breaker('platform'), partner: breaker('partner') };
    this.#pool = new Pool(url.origin, {
      connections: options.connections,
      pipelining: 1,
      keepAliveTimeout: 30_000,
      keepAliveMaxTimeout: 120_000,
      headersTimeout: options.timeoutMs,
      bodyTimeout: options.timeoutMs,
      connect: { timeout: Math.min(options.timeoutMs, 10_000) },
    });
  }

  /**
   * Sends one call (GETs with retries) and returns the parsed JSON body of a 2xx
   * answer. Concurrent identical GETs (same group, path and key) share one call.
   */
  call<T>(request: UpstreamRequest): Promise<T> {
    const signal = request.signal;
    if (signal?.aborted) return Promise.reject(callerAborted(signal.reason, true));
    // A POST is never shared: each caller's booking or cancellation is its own.
    // Group and path hold no newline (the path is URL-encoded), so the key, last, cannot blur the identity.
    const identity = request.method === 'GET' ? `${request.group}\n${request.path}\n${request.key}` : undefined;
    let flight = identity === undefined ? undefined : this.#shared.get(identity);
    if (!flight) {
      const started = new Flight(identity);
      this.#shared.add(started);
      this.#call(request, started).then(
        (body) => this.#shared.settle(started, false, body),
        (error: unknown) => this.#shared.settle(started, true, error),
      );
      flight = started;
    }
    return this.#shared.join<T>(flight, signal);
  }

  /**
   * One keyless GET of the partner group's availability, outside the breakers, the
   * shared reads and the call records: the health check's view of the upstream.
   * Resolves with the status of any answer (a 401 included); rejects as a call would
   * when nothing answers in time.
   */
  async probe(): Promise<number> {
    const controller = new AbortController();
    const timer = setTimeout(() => controller.abort(), this.#options.timeoutMs);
    try {
      const response = await this.#send(
        { group: 'partner', method: 'GET', path: '/availability', route: '/availability', key: '' },
        performance.now() + this.#options.timeoutMs,
        controller.signal,
      );
      return response.status;
    } catch (error) {
      if (controller.signal.aborted) throw new UpstreamTimeoutError(undefined, { cause: error });
      throw classifyThrown(error, {
        group: 'partner',
        method: 'GET',
        path: '/availability',
        route: '/availability',
        key: '',
      });
    } finally {
      clearTimeout(timer);
    }
  }

  /** Each group's circuit now: closed, open (failing fast) or half-open (one trial call). */
  breakerState(): BreakerStates {
    return { platform: this.#breakers.platform.state, partner: this.#breakers.partner.state };
  }

  /** Hears every change of a group's circuit; returns the way to stop listening. */
  onBreakerChange(listener: (group: ApiGroupName, state: BreakerState) => void): () => void {
    this.#breakerListeners.add(listener);
    return () => this.#breakerListeners.delete(listener);
  }

  async #call<T>(request: UpstreamRequest, flight: Flight): Promise<T> {
    const started = performance.now();
    let attempts = 0;
    let status: number | undefined;
    let timer: NodeJS.Timeout | undefined;
    try {
      // The group refused this key a moment ago: asking again would only cost the upstream a call.
      if (request.key && this.#options.keys?.refusedBy(request.key, request.group))
        throw new UnauthenticatedError(REFUSED_KEY);
      // undici 7 refuses such a key as a header value but keeps the pool slot it took:
      // after `connections` of them every call would stall. Refuse it before undici sees it.
      if (NOT_A_HEADER_VALUE.test(request.key))
        throw new UpstreamProtocolError('The merchant key cannot be sent as an HTTP header value.');
      const deadline = started + this.#options.timeoutMs;
      // One timer for the whole call, retries included; it aborts the flight's request.
      timer = setTimeout(() => {
        flight.timedOut = true;
        flight.abort();
      }, this.#options.timeoutMs);
      const breaker = this.#breakers[request.group];
      for (;;) {
        // An open circuit refuses here without sending, on a retry as on a first attempt.
        const trial = breaker.admit();
        attempts += 1;
        try {
          const answer = await this.#attempt<T>(request, deadline, flight);
          breaker.record(trial, undefined);
          this.#report(request, answer.status, 'ok', attempts, started);
          return answer.body;
        } catch (error) {
          // Every admitted attempt is counted, or a half-open trial would hold its slot for good.
          breaker.record(trial, error instanceof AttemptFailure ? error : UNEXPECTED_FAILURE);
          if (!(error instanceof AttemptFailure)) throw error;
          status = error.status;
          if (!error.retryable) throw error.error;
          const delay = this.#retryDelay(attempts, error.retryAfterMs);
          const canRetry = request.method === 'GET' && attempts <= MAX_GET_RETRIES && !flight.abandoned;
          // A retry only happens when it can still finish inside the budget.
          if (!canRetry || performance.now() + delay + 10 >= deadline) throw error.error;
          await pause(delay, flight);
          if (flight.abandoned) throw callerAborted(undefined);
        }
      }
    } catch (error) {
      const known = error instanceof DeliveryGraphError ? error : classifyThrown(error, request);
      this.#report(request, status, known.code, attempts, started);
      throw known;
    } finally {
      clearTimeout(timer);
    }
  }

  /** One request and its answer, every failure wrapped for the retry loop and the breaker. */
  async #attempt<T>(request: UpstreamRequest, deadline: number, flight: Flight): Promise<Answer<T>> {
    let response: RawResponse;
    try {
      response = await this.#send(request, deadline, flight);
    } catch (error) {
      if (flight.abandoned) throw new AttemptFailure(callerAborted(error), { callerAborted: true });
      if (flight.timedOut) throw new AttemptFailure(new UpstreamTimeoutError(undefined, { cause: error }));
      const classified = classifyThrown(error, request);
      throw new AttemptFailure(classified, {
        // A dropped or refused connection may be retried; the breaker counts it.
        retryable: classified instanceof UpstreamUnavailableError,
        // undici refused the request as malformed before sending it: nothing about the upstream.
        unsent: (error as { code?: unknown } | undefined)?.code === 'UND_ERR_INVALID_ARG',
      });
    }
    const { status } = response;
    if (status >= 200 && status < 300) {
      this.#learn(request, true);
      try {
        return { status, body: parseSuccess<T>(response, request) };
      } catch (error) {
        throw new AttemptFailure(classifyThrown(error, request), { status });
      }
    }
    const retryable = RETRYABLE_STATUS.has(status) || status === 429;
    const error = classifyStatus(response, request);
    if (error instanceof UnauthenticatedError) this.#learn(request, false);
    // A 5xx or 429 may come from before the key was looked at: it says nothing about the key.
    else if (status < 500 && status !== 429) this.#learn(request, true);
    throw new AttemptFailure(error, {
      status,
      retryable,
      retryAfterMs: retryable ? retryAfterMs(response.retryAfter) : undefined,
    });
  }

  #learn(request: UpstreamRequest, accepted: boolean): void {
    if (request.key) this.#options.keys?.learn(request.key, request.group, accepted);
  }

  #report(
    request: UpstreamRequest,
    status: number | undefined,
    outcome: string,
    attempts: number,
    started: number,
  ): void {
    this.#options.onCall?.({
      group: request.group,
      method: request.method,
      route: request.route,
      status,
      outcome,
      attempts,
      durationMs: performance.now() - started,
    });
  }

  #retryDelay(attempt: number, retryAfterMs: number | undefined): number {
    const base = (this.#options.retryBaseMs ?? 50) * 2 ** (attempt - 1);
    const jittered = base * (0.5 + Math.random());
    return retryAfterMs === undefined ? jittered : Math.max(jittered, retryAfterMs);
  }

  #send(request: UpstreamRequest, deadline: number, signal: AbortSignal | Flight): Promise<RawResponse> {
    const remaining = Math.max(1, Math.floor(deadline - performance.now()));
    const headers: Record<string, string> = { accept: 'application/json' };
    if (request.key) headers.authorization = `Bearer ${request.key}`;
    let body: string | undefined;
    if (request.body !== undefined) {
      body = JSON.stringify(request.body);
      headers['content-type'] = 'application/json';
    }
    return new Promise((resolve, reject) => {
      const exchange = new Exchange(this.#options.maxResponseBytes, resolve, reject);
      exchange.watch(signal);
      this.#pool.dispatch(
        {
          method: request.method,
          path: this.#basePath + request.path,
          headers,
          body,
          headersTimeout: remaining,
          bodyTimeout: remaining,
        },
        exchange,
      );
    });
  }

  async close(): Promise<void> {
    this.#breakers.platform.shutdown();
    this.#breakers.partner.shutdown();
    await this.#pool.close();
  }
}

const REFUSED_KEY = 'The delivery service refused the merchant key.';
/** An attempt that failed in a way #attempt did not wrap: counted as the upstream's fault. */
const UNEXPECTED_FAILURE: AttemptOutcome = { status: undefined, unsent: false, callerAborted: false };

/** Waits `ms`, or less when the flight is aborted meanwhile. */
function pause(ms: number, flight: Flight): Promise<void> {
  if (flight.aborted) return Promise.resolve();
  return new Promise((resolve) => {
    const done = () => {
      clearTimeout(timer);
      stopListening();
      resolve();
    };
    const timer = setTimeout(done, ms);
    const stopListening = flight.onAbort(done);
  });
}

function retryAfterMs(value: string | undefined): number | undefined {
  if (!value) return undefined;
  if (/^\d+$/.test(value.trim())) return Number(value) * 1000;
  const date = Date.parse(value);
  return Number.isNaN(date) ? undefined : Math.max(0, date - Date.now());
}

function parseJson(text: string): unknown {
  try {
    return JSON.parse(text);
  } catch {
    return undefined;
  }
}

function parseSuccess<T>(response: RawResponse, request: UpstreamRequest): T {
  const parsed = parseJson(response.text);
  if (parsed === undefined || parsed === null || typeof parsed !== 'object') {
    throw new UpstreamProtocolError(
      `The delivery service sent a ${response.status} answer to ${request.method} ${request.route} that is not a JSON object.`,
    );
  }
  return parsed as T;
}

/**
 * Classifies a non-2xx answer by its status and by the body's `code` (platform)
 * or `error` (partner) field, reading liberally as CONTRACT.md says.
 */
export function classifyStatus(
  response: { status: number; text: string; retryAfter?: string },
  request: Pick<UpstreamRequest, 'method' | 'route' | 'cancel'> & { key?: string },
): DeliveryGraphError {
  // Whatever it becomes, the client is told what the upstream said (scrubbed, bounded), never the raw body.
  const body = parseJson(response.text);
  const refusal = upstreamRefusal(
    response.status,
    body && typeof body === 'object' ? (body as Record<string, unknown>) : {},
    request.key,
  );
  const error = classifyRefusal(response, request) ?? new CancelRefusedError(refusal);
  error.upstream = refusal;
  return error;
}

/** Statuses that say nothing about the delivery a cancel named: they stay what they are for any call. */
const NOT_ABOUT_THE_DELIVERY = new Set([408, 429]);

/** What a non-2xx answer is; undefined for a cancel's refusal about the delivery (a CancelRefusedError). */
function classifyRefusal(
  response: { status: number; text: string; retryAfter?: string },
  request: Pick<UpstreamRequest, 'method' | 'route' | 'cancel'>,
): DeliveryGraphError | undefined {
  const body = parseJson(response.text);
  const fields = body && typeof body === 'object' ? (body as Record<string, unknown>) : {};
  const code =
    typeof fields.code === 'string' ? fields.code : typeof fields.error === 'string' ? fields.error : undefined;
  const message = typeof fields.message === 'string' ? fields.message : undefined;
  const where = `${request.method} ${request.route}`;

  // A conflict on a cancel is the delivery's state, whatever code or body (even none) comes with it.
  if (request.cancel && response.status === 409) return new NotCancelableError();
  if (code === 'invalid_api_key' || response.status === 401) {
    return new UnauthenticatedError(REFUSED_KEY);
  }
  if (code === 'not_cancelable') return new NotCancelableError();
  if (code === 'not_found' || response.status === 404) return new NotFoundError();
  // Any other 4xx to a cancel (already_canceled, 403, 422, …) is the upstream's answer about that delivery.
  if (request.cancel && response.status >= 400 && response.status < 500 && !NOT_ABOUT_THE_DELIVERY.has(response.status))
    return undefined;
  const errors = fields.errors;
  if ((errors && typeof errors === 'object') || response.status === 400 || response.status === 422) {
    // The upstream's validation message names a request field; it carries no secret.
    return new UpstreamValidationError(message ?? 'The delivery service rejected the request.', fieldErrors(errors));
  }
  if (response.status >= 500 || response.status === 429) {
    const wait = retryAfterMs(response.retryAfter);
    return new UpstreamUnavailableError(`The delivery service answered ${response.status} to ${where}.`, {
      status: response.status,
      retryAfterSeconds: wait === undefined ? undefined : Math.ceil(wait / 1000),
    });
  }
  return new UpstreamProtocolError(
    `The delivery service answered ${response.status} to ${where}, which the facade does not understand.`,
  );
}

/**
 * The body's `errors` as `{field: messages}`. A bare list of messages names no
 * field (its messages go under "" and are placed from their words); anything
 * else carries none.
 */
function fieldErrors(errors: unknown): Record<string, unknown> {
  if (Array.isArray(errors)) return errors.length > 0 ? { '': errors } : {};
  return errors && typeof errors === 'object' ? (errors as Record<string, unknown>) : {};
}

function classifyThrown(error: unknown, request: UpstreamRequest): DeliveryGraphError {
  if (error instanceof DeliveryGraphError) return error;
  if (error instanceof ResponseTooLarge) {
    return new UpstreamProtocolError(
      `The delivery service's answer to ${request.method} ${request.route} is larger than the facade accepts.`,
    );
  }
  const code = (error as { code?: unknown } | undefined)?.code;
  if (typeof code === 'string' && TIMEOUT_ERROR_CODES.has(code))
    return new UpstreamTimeoutError(undefined, { cause: error });
  if (typeof code === 'string' && CONNECTION_ERROR_CODES.has(code)) {
    return new UpstreamUnavailableError('The delivery service could not be reached or dropped the connection.', {
      cause: error,
      unsent: CONNECT_ERROR_CODES.has(code),
    });
  }
  return new UpstreamProtocolError(undefined, { cause: error });
}

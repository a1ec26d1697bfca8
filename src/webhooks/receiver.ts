// The webhook receiver: size cap, JWT verification, durable store, then 200 and
// publication. Events arriving together, or while the previous commit is under
// way, are written in one transaction (one fsync) and published in log order
// after the commit (group-commit.ts).
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { Logger } from '../logger.js';
import { noteErrorCodes, requestInfoOf } from '../observability/request.js';
import type { EventBus } from '../realtime/bus.js';
import { markerOf } from '../domain/booking-marker.js';
import type { AppendResult, Store } from '../store/store.js';
import type { WireWebhookEvent } from '../upstream/wire.js';
import { AppendBatcher } from './group-commit.js';
import { WebhookAuthError, WebhookPayloadError, type WebhookVerifier } from './verify.js';

export const MAX_WEBHOOK_BYTES = 1024 * 1024;

/** What the receiver counts, for metrics and tests. */
export interface WebhookCounters {
  accepted: number;
  duplicate: number;
  stale: number;
  rejected: number;
  /** Refusals by HTTP status (400, 401, 405, 408, 413, 431, 503…), the HTTP server's own included (countRefusal). */
  refusals: Map<number, number>;
}

/**
 * An event of a booking made with an idempotency key carries the key's marker in
 * platform_payload (src/domain/booking-marker.ts): when that booking's answer was
 * lost, this is how the facade learns its uid. Its claim turns done and the merchant that claimed it owns it.
 */
async function resolveBooking(store: Store, payload: WireWebhookEvent, marker: string): Promise<void> {
  // A webhook carries no tracking link (upstream-api.md); a client asking for it gets it read.
  const owner = await store.resolveBookingMarker(marker, { uid: payload.uid, trackingUrl: null });
  if (owner) await store.recordOwner(payload.uid, owner, 'PLATFORM', 'booked');
}

class BodyTooLarge extends Error {}
class BodyTooSlow extends Error {}

/**
 * The body, at most `limit` bytes, arriving within `timeoutMs` (a sender trickling bytes holds a connection).
 * Read with the stream's own events: an async iterator costs promises per chunk.
 */
function readBody(req: IncomingMessage, limit: number, timeoutMs: number): Promise<Buffer> {
  const declared = Number(req.headers['content-length']);
  if (Number.isFinite(declared) && declared > limit) return Promise.reject(new BodyTooLarge());
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    let size = 0;
    const done = (error?: Error) => {
      clearTimeout(timer);
      req.off('data', onData).off('end', onEnd).off('error', onError);
      if (error) reject(error);
      else resolve(chunks.length === 1 ? chunks[0]! : Buffer.concat(chunks, size));
    };
    const onData = (chunk: Buffer) => {
      size += chunk.length;
      if (size > limit) done(new BodyTooLarge());
      else chunks.push(chunk);
    };
    const onEnd = () => done();
    const onError = (error: Error) => done(error);
    const timer = setTimeout(() => {
      done(new BodyTooSlow());
      req.destroy();
    }, timeoutMs);
    req.on('data', onData).on('end', onEnd).on('error', onError);
  });
}

export interface WebhookReceiver {
  handle(req: IncomingMessage, res: ServerResponse): void;
  counters: WebhookCounters;
  /** Counts (and logs) a refusal the HTTP server gave before the receiver ran, e.g. 431 for headers over the limit. */
  countRefusal(status: number, reason: string): void;
}

export interface WebhookReceiverOptions {
  verifier: WebhookVerifier;
  store: Store;
  bus: EventBus;
  logger: Logger;
  /** The body must arrive within this after the headers (WEBHOOK_BODY_TIMEOUT_MS). */
  bodyTimeoutMs: number;
  /** Shared with reconciliation, so events it makes from reads go into the one log order; a new one when absent. */
  batcher?: AppendBatcher;
}

/** A request the receiver has answered already (a refusal), so the next step does not run. */
const ANSWERED = Symbol('answered');

const JSON_HEADERS = ['content-type', 'application/json'];

/** The receiver's steps for one request: read the body, verify the token, store, answer. */
class Receiver implements WebhookReceiver {
  readonly counters: WebhookCounters = { accepted: 0, duplicate: 0, stale: 0, rejected: 0, refusals: new Map() };
  readonly #batcher: AppendBatcher;

  constructor(private readonly options: WebhookReceiverOptions) {
    this.#batcher =
      options.batcher ??
      new AppendBatcher(options.store, options.bus, (error) =>
        options.logger.error({ err: error }, 'stored event not published'),
      );
  }

  handle(req: IncomingMessage, res: ServerResponse): void {
    this.#handle(req, res).catch((error: unknown) => {
      this.options.logger.error({ reqId: requestInfoOf(req)?.id, err: error }, 'webhook handler failed');
      if (!res.headersSent) this.#answer(req, res, 500, { error: 'internal', message: 'The event was not stored.' });
    });
  }

  countRefusal(status: number, reason?: string): void {
    this.counters.rejected += 1;
    this.counters.refusals.set(status, (this.counters.refusals.get(status) ?? 0) + 1);
    if (reason !== undefined) this.options.logger.warn({ status, reason }, 'webhook refused by the HTTP server');
  }

  async #handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    if (req.method !== 'POST') {
      res.setHeader('allow', 'POST');
      return this.#answer(req, res, 405, { error: 'method_not_allowed', message: 'Webhooks are POSTed.' });
    }
    const body = await this.#body(req, res);
    if (body === ANSWERED) return;
    const payload = await this.#verified(req, res, body);
    if (payload === ANSWERED) return;
    let result: AppendResult;
    try {
      result = await this.#batcher.append(payload, new Date().toISOString());
    } catch (error) {
      const reqId = requestInfoOf(req)?.id;
      this.options.logger.error(
        { reqId, err: error, uid: payload.uid, event: payload.event_name },
        'webhook not stored',
      );
      return this.#answer(req, res, 503, {
        error: 'store_unavailable',
        message: 'The event could not be stored; retry later.',
      });
    }
    const marker = markerOf(payload.platform_payload);
    if (marker && !(await this.#resolved(req, res, payload, marker))) return;
    const { event, duplicate } = result;
    if (duplicate) this.counters.duplicate += 1;
    else if (event.stale) this.counters.stale += 1;
    else this.counters.accepted += 1;
    // The one answer every stored webhook gets: written as one piece, headers and body.
    res
      .writeHead(200, JSON_HEADERS)
      .end(`{"status":"${duplicate ? 'duplicate' : 'stored'}","cursor":"${event.seq}","stale":${event.stale}}`);
  }

  /** The body, or ANSWERED when it was too large, too slow or unreadable. */
  async #body(req: IncomingMessage, res: ServerResponse): Promise<Buffer | typeof ANSWERED> {
    const { bodyTimeoutMs, logger } = this.options;
    try {
      return await readBody(req, MAX_WEBHOOK_BYTES, bodyTimeoutMs);
    } catch (error) {
      if (error instanceof BodyTooSlow) {
        // The socket is already destroyed: nothing can be answered, but it is counted and logged.
        this.countRefusal(408);
        const reqId = requestInfoOf(req)?.id;
        logger.warn(
          { reqId, status: 408, reason: `the body did not arrive within ${bodyTimeoutMs} ms` },
          'webhook refused',
        );
      } else if (error instanceof BodyTooLarge) {
        // The rest of the body stays unread: close the connection after the answer,
        // or a keep-alive client's next request on it would hang behind those bytes.
        res.setHeader('connection', 'close');
        this.#answer(req, res, 413, {
          error: 'payload_too_large',
          message: `Webhook bodies are limited to ${MAX_WEBHOOK_BYTES} bytes.`,
        });
        req.destroy();
      } else this.#answer(req, res, 400, { error: 'bad_request', message: 'The request body could not be read.' });
      return ANSWERED;
    }
  }

  /** The signed event, with the facade's own markers taken out; ANSWERED when the token or the body is refused. */
  async #verified(
    req: IncomingMessage,
    res: ServerResponse,
    body: Buffer,
  ): Promise<WireWebhookEvent | typeof ANSWERED> {
    let payload: WireWebhookEvent;
    try {
      payload = await this.options.verifier.verify(req.headers.authorization);
    } catch (error) {
      if (error instanceof WebhookAuthError) {
        this.options.logger.warn(
          { reqId: requestInfoOf(req)?.id, reason: error.message },
          'webhook rejected: verification failed',
        );
        this.#answer(req, res, 401, { error: 'invalid_token', message: 'The webhook token could not be verified.' });
        return ANSWERED;
      }
      if (!(error instanceof WebhookPayloadError)) throw error;
      this.#answer(req, res, 400, { error: 'bad_event', message: error.message });
      return ANSWERED;
    }
    // The body is not trusted (the signed claim is the event) but must still be JSON.
    if (body.length > 0) {
      try {
        JSON.parse(body.toString('utf8'));
      } catch {
        this.#answer(req, res, 400, { error: 'bad_request', message: 'The body is not JSON.' });
        return ANSWERED;
      }
    }
    // The facade's own markers are never the upstream's to set: a webhook carrying facade_source would pass for a read.
    for (const key in payload)
      if (key.startsWith('facade_')) delete (payload as unknown as Record<string, unknown>)[key];
    return payload;
  }

  /** Resolves the booking the event's marker names; false when that failed, and the sender was answered 503. */
  async #resolved(
    req: IncomingMessage,
    res: ServerResponse,
    payload: WireWebhookEvent,
    marker: string,
  ): Promise<boolean> {
    try {
      await resolveBooking(this.options.store, payload, marker);
      return true;
    } catch (error) {
      // Stored, but the booking it names is not resolved: the sender's retry (a duplicate) tries again.
      const reqId = requestInfoOf(req)?.id;
      this.options.logger.error(
        { reqId, err: error, uid: payload.uid },
        'webhook stored, its booking marker not resolved',
      );
      this.#answer(req, res, 503, {
        error: 'store_unavailable',
        message: 'The event could not be processed; retry later.',
      });
      return false;
    }
  }

  /**
   * A refusal: counted, its code in the request's access-log line; those that lose an event the sender will not fix by
   * retrying are also logged.
   */
  #answer(req: IncomingMessage, res: ServerResponse, status: number, body: { error: string; message: string }): void {
    const info = requestInfoOf(req);
    this.countRefusal(status);
    noteErrorCodes(info, [{ extensions: { code: body.error } }]);
    if (status === 400 || status === 408 || status === 413)
      this.options.logger.warn({ reqId: info?.id, status, reason: body.message }, 'webhook refused');
    res.writeHead(status, JSON_HEADERS).end(JSON.stringify(body));
  }
}

export function createWebhookReceiver(options: WebhookReceiverOptions): WebhookReceiver {
  return new Receiver(options);
}

// The webhook receiver: size cap, JWT verification, durable store, then 200 and
// publication. Events arriving together, or while the previous commit is under
// way, are written in one transaction (one fsync) and published in log order
// after the commit.
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { Logger } from '../logger.js';
import { noteErrorCodes, requestInfoOf } from '../observability/request.js';
import type { EventBus } from '../realtime/bus.js';
import { markerOf } from '../domain/booking-marker.js';
import { PartialAppendError, type AppendResult, type Store } from '../store/store.js';
import type { WireWebhookEvent } from '../upstream/wire.js';
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

interface Pending {
  payload: WireWebhookEvent;
  receivedAt: string;
  resolve(result: AppendResult): void;
  reject(error: unknown): void;
}

/** Most events one transaction takes; the rest wait for the next (a bound on one script call's size on Redis). */
const MAX_BATCH = 512;
/**
 * How long one turn of the event loop may spend publishing a stored batch's
 * events (each sends its subscribers' messages within the turn): a batch of
 * hundreds, with tens of subscribers each, held the loop for hundreds of ms.
 */
const PUBLISH_TURN_MS = 2;

const nextTurn = () => new Promise<void>((resolve) => setImmediate(resolve));

/**
 * Group commit: events that arrive while a commit is under way wait and go
 * together in the next one, so a store whose commit waits on a slow fsync
 * (Redis with appendfsync always) makes one commit per fsync, not one per turn
 * of the event loop. With nothing under way, what arrives in one turn shares a
 * transaction. One commit at a time keeps the log and the publications in one order.
 */
export class AppendBatcher {
  #waiting: Pending[] = [];
  #committing = false;
  #scheduled = false;
  /**
   * Events published per turn: as many as took about PUBLISH_TURN_MS last time (their subscribers' messages included).
   */
  #perTurn = 8;

  constructor(
    private readonly store: Store,
    private readonly bus: EventBus,
    private readonly onPublishError: (error: unknown) => void,
  ) {}

  append(payload: WireWebhookEvent, receivedAt: string): Promise<AppendResult> {
    return new Promise((resolve, reject) => {
      this.#waiting.push({ payload, receivedAt, resolve, reject });
      this.#schedule();
    });
  }

  #schedule(): void {
    if (this.#committing || this.#scheduled || this.#waiting.length === 0) return;
    this.#scheduled = true;
    setImmediate(() => {
      this.#scheduled = false;
      void this.#commit();
    });
  }

  async #commit(): Promise<void> {
    if (this.#committing) return;
    this.#committing = true;
    const batch = this.#waiting.splice(0, MAX_BATCH);
    try {
      await this.#store(batch);
    } finally {
      this.#committing = false;
      this.#schedule();
    }
  }

  async #store(batch: Pending[]): Promise<void> {
    let results: ReadonlyArray<AppendResult | Error>;
    try {
      results = await this.store.appendEvents(batch);
    } catch (error) {
      // Some events could not be stored: only those fail (503, the sender retries them); the rest were stored.
      if (!(error instanceof PartialAppendError)) {
        for (const pending of batch) pending.reject(error);
        return;
      }
      results = error.outcomes;
    }
    // In log order, a slice per turn of the loop (the next batch waits until the last is out): the slice's subscriber
    // messages go out in its turn, then other work has the loop, and the slice's size follows what a turn took.
    for (let start = 0; start < results.length;) {
      const began = performance.now();
      const end = Math.min(results.length, start + this.#perTurn);
      for (let index = start; index < end; index += 1) this.#publish(results[index]!, batch[index]!);
      const published = end - start;
      start = end;
      await nextTurn();
      // As many as this slice's events would have filled the turn's budget with.
      const took = performance.now() - began;
      this.#perTurn = Math.max(
        1,
        Math.min(MAX_BATCH, Math.round((published * PUBLISH_TURN_MS) / Math.max(took, 0.05))),
      );
    }
  }

  /** Stored is stored: the sender gets its 200 even if publishing the event fails. */
  #publish(result: AppendResult | Error, pending: Pending): void {
    if (result instanceof Error) return pending.reject(result);
    if (!result.duplicate) {
      try {
        this.bus.publish(result.event);
      } catch (error) {
        this.onPublishError(error);
      }
    }
    pending.resolve(result);
  }
}

/**
 * An event of a booking made with an idempotency key carries the key's marker in
 * platform_payload (src/domain/booking-marker.ts): when that booking's answer was
 * lost, this is how the facade learns its uid. Its claim turns done and the merchant that claimed it owns it.
 */
async function resolveBooking(store: Store, payload: WireWebhookEvent): Promise<void> {
  const marker = markerOf(payload.platform_payload);
  if (!marker) return;
  // A webhook carries no tracking link (upstream-api.md); a client asking for it gets it read.
  const owner = await store.resolveBookingMarker(marker, { uid: payload.uid, trackingUrl: null });
  if (owner) await store.recordOwner(payload.uid, owner, 'PLATFORM', 'booked');
}

class BodyTooLarge extends Error {}
class BodyTooSlow extends Error {}

/** The body, at most `limit` bytes, arriving within `timeoutMs` (a sender trickling bytes holds a connection). */
async function readBody(req: IncomingMessage, limit: number, timeoutMs: number): Promise<Buffer> {
  const declared = Number(req.headers['content-length']);
  if (Number.isFinite(declared) && declared > limit) throw new BodyTooLarge();
  const chunks: Buffer[] = [];
  let size = 0;
  let late = false;
  const timer = setTimeout(() => {
    late = true;
    req.destroy(new BodyTooSlow());
  }, timeoutMs);
  try {
    for await (const chunk of req) {
      size += (chunk as Buffer).length;
      if (size > limit) throw new BodyTooLarge();
      chunks.push(chunk as Buffer);
    }
  } catch (error) {
    throw late ? new BodyTooSlow() : error;
  } finally {
    clearTimeout(timer);
  }
  return Buffer.concat(chunks, size);
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

export function createWebhookReceiver(options: WebhookReceiverOptions): WebhookReceiver {
  const { verifier, logger } = options;
  const batcher =
    options.batcher ??
    new AppendBatcher(options.store, options.bus, (error) =>
      logger.error({ err: error }, 'stored event not published'),
    );
  const counters: WebhookCounters = { accepted: 0, duplicate: 0, stale: 0, rejected: 0, refusals: new Map() };

  const countRefusal = (status: number) => {
    counters.rejected += 1;
    counters.refusals.set(status, (counters.refusals.get(status) ?? 0) + 1);
  };
  /**
   * Every refusal is counted, and its code goes into the request's access-log line;
   * those that lose an event the sender will not fix by retrying are also logged.
   */
  const answer = (req: IncomingMessage, res: ServerResponse, status: number, body: Record<string, unknown>) => {
    const info = requestInfoOf(req);
    if (status >= 400) {
      countRefusal(status);
      noteErrorCodes(info, [{ extensions: { code: body.error } }]);
    }
    if (status === 400 || status === 408 || status === 413)
      logger.warn({ reqId: info?.id, status, reason: body.message }, 'webhook refused');
    res.writeHead(status, { 'content-type': 'application/json' }).end(JSON.stringify(body));
  };

  const handle = async (req: IncomingMessage, res: ServerResponse): Promise<void> => {
    const reqId = requestInfoOf(req)?.id;
    if (req.method !== 'POST') {
      res.setHeader('allow', 'POST');
      return answer(req, res, 405, { error: 'method_not_allowed', message: 'Webhooks are POSTed.' });
    }
    let body: Buffer;
    try {
      body = await readBody(req, MAX_WEBHOOK_BYTES, options.bodyTimeoutMs);
    } catch (error) {
      if (error instanceof BodyTooSlow) {
        // The socket is already destroyed: nothing can be answered, but it is counted and logged.
        countRefusal(408);
        logger.warn(
          { reqId, status: 408, reason: `the body did not arrive within ${options.bodyTimeoutMs} ms` },
          'webhook refused',
        );
        return;
      }
      if (error instanceof BodyTooLarge) {
        // The rest of the body stays unread: close the connection after the answer,
        // or a keep-alive client's next request on it would hang behind those bytes.
        res.setHeader('connection', 'close');
        answer(req, res, 413, {
          error: 'payload_too_large',
          message: `Webhook bodies are limited to ${MAX_WEBHOOK_BYTES} bytes.`,
        });
        req.destroy();
        return;
      }
      return answer(req, res, 400, { error: 'bad_request', message: 'The request body could not be read.' });
    }
    let payload: WireWebhookEvent;
    try {
      payload = await verifier.verify(req.headers.authorization);
    } catch (error) {
      if (error instanceof WebhookAuthError) {
        logger.warn({ reqId, reason: error.message }, 'webhook rejected: verification failed');
        return answer(req, res, 401, { error: 'invalid_token', message: 'The webhook token could not be verified.' });
      }
      if (error instanceof WebhookPayloadError)
        return answer(req, res, 400, { error: 'bad_event', message: error.message });
      throw error;
    }
    // The body is not trusted (the signed claim is the event) but must still be JSON.
    if (body.length > 0) {
      try {
        JSON.parse(body.toString('utf8'));
      } catch {
        return answer(req, res, 400, { error: 'bad_request', message: 'The body is not JSON.' });
      }
    }
    // The facade's own markers are never the upstream's to set: a webhook carrying facade_source would pass for a read.
    for (const key of Object.keys(payload))
      if (key.startsWith('facade_')) delete (payload as unknown as Record<string, unknown>)[key];
    let result: AppendResult;
    try {
      result = await batcher.append(payload, new Date().toISOString());
    } catch (error) {
      logger.error({ reqId, err: error, uid: payload.uid, event: payload.event_name }, 'webhook not stored');
      return answer(req, res, 503, {
        error: 'store_unavailable',
        message: 'The event could not be stored; retry later.',
      });
    }
    try {
      await resolveBooking(options.store, payload);
    } catch (error) {
      // Stored, but the booking it names is not resolved: the sender's retry (a duplicate) tries again.
      logger.error({ reqId, err: error, uid: payload.uid }, 'webhook stored, its booking marker not resolved');
      return answer(req, res, 503, {
        error: 'store_unavailable',
        message: 'The event could not be processed; retry later.',
      });
    }
    if (result.duplicate) counters.duplicate += 1;
    else if (result.event.stale) counters.stale += 1;
    else counters.accepted += 1;
    answer(req, res, 200, {
      status: result.duplicate ? 'duplicate' : 'stored',
      cursor: String(result.event.seq),
      stale: result.event.stale,
    });
  };

  return {
    counters,
    countRefusal(status, reason) {
      countRefusal(status);
      logger.warn({ status, reason }, 'webhook refused by the HTTP server');
    },
    handle(req, res) {
      handle(req, res).catch((error: unknown) => {
        logger.error({ reqId: requestInfoOf(req)?.id, err: error }, 'webhook handler failed');
        if (!res.headersSent) answer(req, res, 500, { error: 'internal', message: 'The event was not stored.' });
      });
    },
  };
}

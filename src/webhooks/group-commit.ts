// Group commit for the event log: every event (a webhook, or one reconciliation
// made from a read) is appended through one AppendBatcher, so the log and the
// publications keep one order, and events that arrive close together share one
// transaction, one fsync and one trip to the store's writer.
import type { EventBus } from '../realtime/bus.js';
import {
  PartialAppendError,
  type AppendCondition,
  type AppendResult,
  type NotStored,
  type Store,
} from '../store/store.js';
import type { WireWebhookEvent } from '../upstream/wire.js';

interface Pending {
  payload: WireWebhookEvent;
  receivedAt: string;
  onlyIf?: AppendCondition;
  resolve(result: AppendResult | NotStored): void;
  reject(error: unknown): void;
}

/**
 * How long a batch may wait for more events before its commit starts, and how
 * many make it go at once. The wait is taken only while events arrive at least
 * two per window (see #holds): then one fsync serves several acknowledgements,
 * which at a thousand webhooks a second is most of what storing one costs; at a
 * lower rate nothing waits.
 */
export interface CommitWindow {
  ms: number;
  /** A batch this large is committed without waiting for the rest of the window. */
  target: number;
}

export const COMMIT_WINDOW: CommitWindow = Object.freeze({ ms: 5, target: 32 });

/** Most events one transaction takes; the rest wait for the next (a bound on one script call's size on Redis). */
const MAX_BATCH = 512;
/**
 * How long one turn of the event loop may spend publishing a stored batch's
 * events (each sends its subscribers' messages within the turn): a batch of
 * hundreds, with tens of subscribers each, held the loop for hundreds of ms.
 */
const PUBLISH_TURN_MS = 2;
/** Weight of the newest gap in the running mean of gaps between arrivals. */
const GAP_WEIGHT = 0.125;

const nextTurn = () => new Promise<void>((resolve) => setImmediate(resolve));

/**
 * Events that arrive while a commit is under way wait and go together in the
 * next one, so a store whose commit waits on a slow fsync makes one commit per
 * fsync, not one per event. With nothing under way, a batch starts at the next
 * turn of the event loop, or, while events come faster than two per window, when
 * the window since its first event ends or it reaches the target. One commit at
 * a time keeps the log and the publications in one order.
 */
export class AppendBatcher {
  #waiting: Pending[] = [];
  /** When the first waiting event arrived (performance.now()). */
  #firstAt = 0;
  #committing = false;
  #timer: NodeJS.Timeout | undefined;
  #immediate = false;
  /** Running mean of the gaps between arrivals, ms. */
  #gap = Infinity;
  #lastAt = -Infinity;
  /**
   * Events published per turn: as many as took about PUBLISH_TURN_MS last time (their subscribers' messages included).
   */
  #perTurn = 8;

  constructor(
    private readonly store: Store,
    private readonly bus: EventBus,
    private readonly onPublishError: (error: unknown) => void,
    private readonly window: CommitWindow = COMMIT_WINDOW,
  ) {}

  /** Stores an event (whatever the store judges of it), then publishes it unless it is a duplicate. */
  append(payload: WireWebhookEvent, receivedAt: string): Promise<AppendResult> {
    return this.#enqueue(payload, receivedAt, undefined) as Promise<AppendResult>;
  }

  /** An event made from a read: stored (and published) only when the store finds its condition holds. */
  appendIf(payload: WireWebhookEvent, receivedAt: string, onlyIf: AppendCondition): Promise<AppendResult | NotStored> {
    return this.#enqueue(payload, receivedAt, onlyIf);
  }

  #enqueue(
    payload: WireWebhookEvent,
    receivedAt: string,
    onlyIf: AppendCondition | undefined,
  ): Promise<AppendResult | NotStored> {
    const now = performance.now();
    const gap = now - this.#lastAt;
    this.#gap = this.#gap === Infinity ? gap : this.#gap + GAP_WEIGHT * (Math.min(gap, 1_000) - this.#gap);
    this.#lastAt = now;
    if (this.#waiting.length === 0) this.#firstAt = now;
    return new Promise((resolve, reject) => {
      this.#waiting.push(
        onlyIf ? { payload, receivedAt, onlyIf, resolve, reject } : { payload, receivedAt, resolve, reject },
      );
      this.#schedule();
    });
  }

  /** Whether a batch waits for the window: events come at least two per window. */
  #holds(): boolean {
    return this.window.ms > 0 && this.#gap * 2 <= this.window.ms && this.#waiting.length < this.window.target;
  }

  #schedule(): void {
    if (this.#committing || this.#immediate || this.#waiting.length === 0) return;
    const left = this.#holds() ? this.#firstAt + this.window.ms - performance.now() : 0;
    if (left >= 1) {
      this.#timer ??= setTimeout(() => {
        this.#timer = undefined;
        void this.#commit();
      }, left);
      return;
    }
    clearTimeout(this.#timer);
    this.#timer = undefined;
    this.#immediate = true;
    setImmediate(() => {
      this.#immediate = false;
      void this.#commit();
    });
  }

  async #commit(): Promise<void> {
    if (this.#committing || this.#waiting.length === 0) return;
    this.#committing = true;
    const batch = this.#waiting.splice(0, MAX_BATCH);
    this.#firstAt = performance.now();
    try {
      await this.#store(batch);
    } finally {
      this.#committing = false;
      this.#schedule();
    }
  }

  async #store(batch: Pending[]): Promise<void> {
    let results: ReadonlyArray<AppendResult | NotStored | Error>;
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
  #publish(result: AppendResult | NotStored | Error, pending: Pending): void {
    if (result instanceof Error) return pending.reject(result);
    if ('event' in result && !result.duplicate) {
      try {
        this.bus.publish(result.event);
      } catch (error) {
        this.onPublishError(error);
      }
    }
    pending.resolve(result);
  }
}

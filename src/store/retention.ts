// How long the stores keep what they keep, and the schedule that deletes the
// rest. Both stores trim in small steps on a timer (sqlite.ts, redis.ts), one
// pass at a time, so that nothing grows without bound and no pass holds the
// event loop, or Redis, for long.
import type { Logger } from '../logger.js';

export interface Retention {
  /**
   * Events, their de-duplication entries, delivery state and ownership records older than this are deleted; an
   * ownership record's age counts from the last event or read that proved it (proofRefreshMs).
   */
  eventRetentionMs: number;
  /** Idempotency keys older than this (since their booking completed) are deleted. */
  idempotencyRetentionMs: number;
}

/**
 * Rows or stream entries one trim step deletes: a step is one short transaction
 * (SQLite: about 3 ms for 200 events of 2.5 KB, fsync included) or one pipeline (Redis).
 */
export const TRIM_BATCH = 200;

/**
 * Time between two trim passes: a quarter of the shorter retention, so nothing
 * outlives its retention by much, but at least 250 ms and at most a minute.
 */
export function trimIntervalMs(retention: Retention): number {
  const shorter = Math.min(retention.eventRetentionMs, retention.idempotencyRetentionMs);
  return Math.min(60_000, Math.max(250, Math.floor(shorter / 4)));
}

/**
 * How old the last proof of an owner record may be before a new one is written (an event, or its merchant's proof):
 * a hundredth of the retention, at most a minute. A record's retention counts from its last proof to within this,
 * and a delivery's stream of events rewrites its record once per this at most.
 */
export function proofRefreshMs(retention: Pick<Retention, 'eventRetentionMs'>): number {
  return Math.min(60_000, Math.floor(retention.eventRetentionMs / 100));
}

/** Lets other work (requests, webhooks) run between two trim steps. */
export const yieldToEventLoop = () => new Promise<void>((resolve) => setImmediate(resolve));

/**
 * Runs a store's trim passes every interval, one at a time: a pass asked for
 * while one runs starts after it. stop() ends the schedule and waits for the
 * pass in progress, which checks `stopping()` between its steps.
 */
export class TrimSchedule {
  readonly #pass: (stopping: () => boolean) => Promise<void>;
  readonly #intervalMs: number;
  readonly #logger: Logger | undefined;
  #chain: Promise<void> = Promise.resolve();
  #timer: NodeJS.Timeout | undefined;
  #stopped = false;

  constructor(pass: (stopping: () => boolean) => Promise<void>, intervalMs: number, logger?: Logger) {
    this.#pass = pass;
    this.#intervalMs = intervalMs;
    this.#logger = logger;
    this.#next();
  }

  #next(): void {
    if (this.#stopped) return;
    this.#timer = setTimeout(() => {
      this.run()
        .catch((error: unknown) =>
          this.#logger?.warn(
            { err: error instanceof Error ? error.message : error },
            'trimming expired data failed; trying again later',
          ),
        )
        .finally(() => this.#next());
    }, this.#intervalMs);
    // The schedule alone must not keep a process alive.
    this.#timer.unref();
  }

  /** One pass now, after the one in progress; rejects with what made it fail. */
  run(): Promise<void> {
    const pass = this.#chain.then(() => (this.#stopped ? undefined : this.#pass(() => this.#stopped)));
    this.#chain = pass.catch(() => undefined);
    return pass;
  }

  async stop(): Promise<void> {
    this.#stopped = true;
    clearTimeout(this.#timer);
    await this.#chain;
  }
}

// A subscriber's queue of pending events. Location updates are coalesced (the
// latest per delivery wins) so a slow reader never piles them up; status events
// are never dropped, and a reader that falls too far behind is cut off.
import { SlowConsumerError } from '../errors.js';

export interface EventQueueOptions<T> {
  /**
   * Most events that may wait. A reader over it for longer than `graceMs` (one
   * that is not catching up), or over `hardLimitFactor` times it at any moment,
   * makes the queue fail with SlowConsumerError. A burst stored in one group
   * commit that a reader works through within the grace is not a slow reader.
   */
  maxPending: number;
  /** How long the queue may stay over maxPending (default 1000 ms). */
  graceMs?: number;
  /** Over maxPending × this, the queue fails at once, whatever the grace (default 10). */
  hardLimitFactor?: number;
  /** Items with the same key replace each other while waiting; undefined: never coalesced. */
  coalesceKey(item: T): string | undefined;
  /** Coalescing starts once this many events wait: a reader keeping up sees every position. */
  coalesceAfter?: number;
  /** Called once when the reader falls too far behind. */
  onOverflow?(pending: number): void;
  /** Called once when the queue ends, for whatever reason. */
  onEnd?(): void;
}

const GONE = Symbol('coalesced');

export class EventQueue<T> implements AsyncIterableIterator<T> {
  readonly #options: EventQueueOptions<T>;
  /** Waiting items from #head on; a coalesced item leaves GONE in its old place. */
  readonly #items: Array<T | typeof GONE> = [];
  #head = 0;
  #count = 0;
  /** Position in #items of the waiting item with each coalesce key. */
  readonly #slots = new Map<string, number>();
  #waiting: ((result: IteratorResult<T>) => void) | undefined;
  #failWaiting: ((error: Error) => void) | undefined;
  #ended = false;
  #error: Error | undefined;
  /** Set while the queue is over maxPending: fires at the end of the grace. */
  #graceTimer: NodeJS.Timeout | undefined;

  constructor(options: EventQueueOptions<T>) {
    this.#options = options;
  }

  get pending(): number {
    return this.#count;
  }

  push(item: T): void {
    if (this.#ended) return;
    if (this.#waiting) {
      const resolve = this.#waiting;
      this.#waiting = undefined;
      this.#failWaiting = undefined;
      resolve({ value: item, done: false });
      return;
    }
    const key = this.pending >= (this.#options.coalesceAfter ?? 0) ? this.#options.coalesceKey(item) : undefined;
    if (key !== undefined) {
      // The newer item goes to the back, so the reader still sees the log in order.
      const slot = this.#slots.get(key);
      if (slot !== undefined) {
        this.#items[slot] = GONE;
        this.#count -= 1;
      }
      this.#slots.set(key, this.#items.length);
    }
    this.#items.push(item);
    this.#count += 1;
    const { maxPending, graceMs = 1_000, hardLimitFactor = 10 } = this.#options;
    if (this.pending <= maxPending) return;
    if (this.pending > maxPending * hardLimitFactor) return this.#overflow();
    // Over the limit: the reader gets graceMs to come back under it.
    this.#graceTimer ??= setTimeout(() => {
      this.#graceTimer = undefined;
      if (!this.#ended && this.pending > maxPending) this.#overflow();
    }, graceMs);
    this.#graceTimer.unref?.();
  }

  #overflow(): void {
    this.#options.onOverflow?.(this.pending);
    this.fail(new SlowConsumerError(`subscriber too slow: more than ${this.#options.maxPending} events waiting`));
  }

  /** Ends the queue: the reader gets the waiting items, then done. */
  end(): void {
    this.#finish();
    if (this.#waiting && this.pending === 0) this.#waiting({ value: undefined, done: true });
  }

  /** Ends the queue with an error the reader gets at once. */
  fail(error: Error): void {
    this.#error = error;
    this.#items.length = 0;
    this.#head = 0;
    this.#count = 0;
    this.#slots.clear();
    this.#finish();
    this.#failWaiting?.(error);
  }

  #finish(): void {
    clearTimeout(this.#graceTimer);
    this.#graceTimer = undefined;
    if (this.#ended) return;
    this.#ended = true;
    this.#options.onEnd?.();
  }

  next(): Promise<IteratorResult<T>> {
    if (this.#error) return Promise.reject(this.#error);
    if (this.#count > 0) {
      while (this.#items[this.#head] === GONE) this.#head += 1;
      const item = this.#items[this.#head] as T;
      this.#items[this.#head] = GONE;
      this.#head += 1;
      this.#count -= 1;
      const key = this.#options.coalesceKey(item);
      if (key !== undefined && this.#slots.get(key) === this.#head - 1) this.#slots.delete(key);
      if (this.#head > 1024 && this.#head * 2 > this.#items.length) this.#compact();
      return Promise.resolve({ value: item, done: false });
    }
    if (this.#ended) return Promise.resolve({ value: undefined, done: true });
    return new Promise((resolve, reject) => {
      this.#waiting = resolve;
      this.#failWaiting = reject;
    });
  }

  #compact(): void {
    this.#items.splice(0, this.#head);
    for (const [key, slot] of this.#slots) this.#slots.set(key, slot - this.#head);
    this.#head = 0;
  }

  return(): Promise<IteratorResult<T>> {
    this.#items.length = 0;
    this.#head = 0;
    this.#count = 0;
    this.#slots.clear();
    this.#finish();
    this.#waiting?.({ value: undefined, done: true });
    this.#waiting = undefined;
    return Promise.resolve({ value: undefined, done: true });
  }

  [Symbol.asyncIterator](): AsyncIterableIterator<T> {
    return this;
  }
}

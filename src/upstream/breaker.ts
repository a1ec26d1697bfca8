// One circuit breaker per endpoint group: a state and counters that the HTTP
// client checks before each attempt and updates after it, so a retry after the
// circuit opened fails fast too. Only the upstream's own faults count: an answer
// with a 4xx status (bad key, unknown uid, not cancelable, invalid input, the
// caller's rate limit) or a request that never left is the caller's doing, and
// must not let one merchant open the circuit for all.
import { UpstreamUnavailableError } from '../errors.js';

export type BreakerState = 'closed' | 'open' | 'half-open';

export interface BreakerSettings {
  /** Calls in the rolling window before the error rate can open the circuit. */
  volumeThreshold: number;
  /** Share of failed calls in the window, in percent, above which the circuit opens. */
  errorPercent: number;
  /** Time the circuit stays open before one trial call is let through (half-open). */
  resetMs: number;
}

export const DEFAULT_BREAKER: Readonly<BreakerSettings> = Object.freeze({
  volumeThreshold: 20,
  errorPercent: 50,
  resetMs: 5000,
});

/** The rolling window the error rate is measured over: ten buckets of a second. */
const BUCKETS = 10;
const BUCKET_MS = 1000;

/** How an attempt ended, as the breaker needs to judge it. */
export interface AttemptOutcome {
  /** Status of the upstream's answer, when there was one. */
  readonly status: number | undefined;
  /** The request was refused before it was sent (e.g. a key that is not a valid header value). */
  readonly unsent: boolean;
  /** Every caller gave up before the upstream answered. */
  readonly callerAborted: boolean;
}

export class GroupBreaker {
  readonly #group: string;
  readonly #settings: BreakerSettings;
  readonly #onChange: (state: BreakerState) => void;
  #state: BreakerState = 'closed';
  /** Half-open: the one trial attempt is under way. */
  #trialRunning = false;
  #resetTimer: NodeJS.Timeout | undefined;
  // Bucket i counts the attempts that ended in the second stamped in #stamps[i].
  readonly #stamps = new Array<number>(BUCKETS).fill(-1);
  readonly #successes = new Array<number>(BUCKETS).fill(0);
  readonly #failures = new Array<number>(BUCKETS).fill(0);

  constructor(group: string, settings: BreakerSettings, onChange: (state: BreakerState) => void) {
    this.#group = group;
    this.#settings = settings;
    this.#onChange = onChange;
  }

  get state(): BreakerState {
    return this.#state;
  }

  /**
   * Lets one attempt through, or throws UPSTREAM_UNAVAILABLE without sending when
   * the circuit is open (or half-open with its trial under way). Returns whether
   * this attempt is the half-open trial; pass that to `record`.
   */
  admit(): boolean {
    if (this.#state === 'closed') return false;
    if (this.#state === 'half-open' && !this.#trialRunning) {
      this.#trialRunning = true;
      return true;
    }
    throw new UpstreamUnavailableError(
      `The circuit to the delivery service's ${this.#group} endpoints is open after repeated failures; calls fail fast until a trial call succeeds.`,
      { unsent: true },
    );
  }

  /** Counts how an admitted attempt ended: `failure` undefined for a 2xx answer. */
  record(trial: boolean, failure: AttemptOutcome | undefined): void {
    if (trial) {
      this.#trialRunning = false;
      // The request never left: the trial proved nothing, the next attempt is the trial.
      if (failure?.unsent) return;
      // An abandoned trial proves nothing either way, so the circuit stays open.
      if (failure && !isCallersFault(failure)) this.#open();
      else this.#close();
      return;
    }
    // Attempts admitted before the circuit opened say nothing about it now.
    if (this.#state !== 'closed') return;
    if (failure && (failure.unsent || failure.callerAborted)) return;
    const failed = failure !== undefined && !isCallersFault(failure);
    const now = Date.now();
    const second = Math.floor(now / BUCKET_MS);
    const index = second % BUCKETS;
    if (this.#stamps[index] !== second) {
      this.#stamps[index] = second;
      this.#successes[index] = 0;
      this.#failures[index] = 0;
    }
    if (!failed) {
      this.#successes[index]! += 1;
      return;
    }
    this.#failures[index]! += 1;
    let successes = 0;
    let failures = 0;
    for (let i = 0; i < BUCKETS; i += 1) {
      if (second - this.#stamps[i]! >= BUCKETS) continue;
      successes += this.#successes[i]!;
      failures += this.#failures[i]!;
    }
    const total = successes + failures;
    if (total >= this.#settings.volumeThreshold && (failures / total) * 100 > this.#settings.errorPercent) this.#open();
  }

  #open(): void {
    this.#state = 'open';
    clearTimeout(this.#resetTimer);
    this.#resetTimer = setTimeout(() => {
      this.#state = 'half-open';
      this.#onChange('half-open');
    }, this.#settings.resetMs);
    this.#resetTimer.unref();
    this.#onChange('open');
  }

  #close(): void {
    // A new start: the failures that opened the circuit no longer count.
    this.#stamps.fill(-1);
    this.#state = 'closed';
    this.#onChange('closed');
  }

  shutdown(): void {
    clearTimeout(this.#resetTimer);
  }
}

/** A 4xx answer: the upstream is up and judged the request. */
function isCallersFault(outcome: AttemptOutcome): boolean {
  return outcome.status !== undefined && outcome.status >= 400 && outcome.status < 500;
}

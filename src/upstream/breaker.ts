// One circuit breaker (opossum) per endpoint group. It guards each attempt, so a
// retry after the circuit opened fails fast too. Only the upstream's own faults
// count: an answer with a 4xx status (bad key, unknown uid, not cancelable,
// invalid input, the caller's rate limit) or a request that never left is the
// caller's doing, and must not let one merchant open the circuit for all.
import CircuitBreaker from 'opossum';
import { UpstreamTimeoutError, UpstreamUnavailableError } from '../errors.js';

export type BreakerState = 'closed' | 'open' | 'half-open';

export interface BreakerSettings {
  /** Calls in the rolling window before the error rate can open the circuit. */
  volumeThreshold: number;
  /** Share of failed calls in the window, in percent, above which the circuit opens. */
  errorPercent: number;
  /** Time the circuit stays open before one trial call is let through (half-open). */
  resetMs: number;
}

export const DEFAULT_BREAKER: Readonly<BreakerSettings> = Object.freeze({ volumeThreshold: 20, errorPercent: 50, resetMs: 5000 });

/** The rolling window the error rate is measured over. */
const WINDOW_MS = 10_000;
/**
 * Opossum gives up on an attempt this long after the call's own deadline would
 * have ended it: a backstop that only fires if an attempt ignores its abort.
 */
const BACKSTOP_GRACE_MS = 1000;

/** How an attempt ended, as the breaker needs to judge it. */
export interface AttemptOutcome {
  /** Status of the upstream's answer, when there was one. */
  readonly status: number | undefined;
  /** The request was refused before it was sent (e.g. a key that is not a valid header value). */
  readonly unsent: boolean;
  /** Every caller gave up before the upstream answered. */
  readonly callerAborted: boolean;
}

type Attempt = () => Promise<unknown>;

export class GroupBreaker {
  readonly #breaker: CircuitBreaker<[Attempt], unknown>;
  readonly #group: string;

  constructor(group: string, settings: BreakerSettings, timeoutMs: number, onChange: (state: BreakerState) => void) {
    this.#group = group;
    this.#breaker = new CircuitBreaker((attempt: Attempt) => attempt(), {
      name: `upstream-${group}`,
      timeout: timeoutMs + BACKSTOP_GRACE_MS,
      volumeThreshold: settings.volumeThreshold,
      errorThresholdPercentage: settings.errorPercent,
      resetTimeout: settings.resetMs,
      rollingCountTimeout: WINDOW_MS,
      rollingCountBuckets: 10,
      // No latency percentiles or snapshot timer: nothing reads them, and every failure would sort them.
      rollingPercentilesEnabled: false,
      enableSnapshots: false,
      errorFilter: (error: unknown) => this.#notCounted(error),
    });
    this.#breaker.on('open', () => onChange('open'));
    this.#breaker.on('halfOpen', () => onChange('half-open'));
    this.#breaker.on('close', () => onChange('closed'));
  }

  get state(): BreakerState {
    if (this.#breaker.opened) return 'open';
    return this.#breaker.halfOpen ? 'half-open' : 'closed';
  }

  /**
   * Runs one attempt through the circuit. When open, rejects at once with
   * UPSTREAM_UNAVAILABLE and sends nothing; when opossum gives up on the attempt
   * (its backstop timeout), `abandon` aborts the undici request so its socket is freed.
   * Per attempt rather than opossum's `abortController` option: that is one controller
   * per breaker, so one abandoned attempt would abort every call in flight.
   */
  async run<T>(attempt: () => Promise<T>, abandon: () => void): Promise<T> {
    try {
      return (await this.#breaker.fire(attempt)) as T;
    } catch (error) {
      if (!(error instanceof Error) || !CircuitBreaker.isOurError(error)) throw error;
      const code = (error as { code?: unknown }).code;
      if (code === 'ETIMEDOUT') {
        abandon();
        throw new UpstreamTimeoutError();
      }
      if (code === 'EOPENBREAKER') {
        throw new UpstreamUnavailableError(
          `The circuit to the delivery service's ${this.#group} endpoints is open after repeated failures; calls fail fast until a trial call succeeds.`,
          { unsent: true },
        );
      }
      throw new UpstreamUnavailableError(`The circuit to the delivery service's ${this.#group} endpoints is shut.`, { unsent: true });
    }
  }

  /** Whether a failed attempt says nothing about the upstream's health. */
  #notCounted(error: unknown): boolean {
    if (!isOutcome(error)) return false;
    if (error.status !== undefined && error.status >= 400 && error.status < 500) return true;
    if (error.unsent) return true;
    // An abandoned trial call proves nothing either way, so the circuit stays open.
    return error.callerAborted && !this.#breaker.halfOpen;
  }

  shutdown(): void {
    this.#breaker.shutdown();
  }
}

function isOutcome(error: unknown): error is AttemptOutcome {
  return typeof error === 'object' && error !== null && 'unsent' in error && 'callerAborted' in error && 'status' in error;
}

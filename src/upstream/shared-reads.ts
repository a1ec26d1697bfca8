// Each upstream call is a flight that one or more callers wait on. Identical
// reads in flight at the same moment share one: same merchant key, same group,
// same path. The key is part of the identity, so nothing is ever shared across
// keys; it lives here only as long as the call that carries it anyway, and is
// never logged. A caller that gives up leaves on its own; the call is aborted
// only once every caller has left.
import { UpstreamUnavailableError } from '../errors.js';

/**
 * One upstream call and the callers waiting for it. It is also what aborts the
 * call's request (http.ts): a list of callbacks, which costs far less per call
 * than an AbortController or an EventEmitter.
 */
export class Flight {
  /** The request was told to stop: the time budget ran out, or every caller left. */
  aborted = false;
  /** Every caller left before the answer. */
  abandoned = false;
  /** The call's time budget ran out. */
  timedOut = false;
  readonly waiters: Waiter[] = [];
  #onAbort: Array<() => void> | undefined;

  /** `identity`: where the flight is listed for sharing (GETs only). */
  constructor(readonly identity: string | undefined) {}

  /** Calls `listener` once when the flight is aborted; returns the way to stop listening. */
  onAbort(listener: () => void): () => void {
    (this.#onAbort ??= []).push(listener);
    return () => {
      const index = this.#onAbort?.indexOf(listener) ?? -1;
      if (index >= 0) this.#onAbort!.splice(index, 1);
    };
  }

  abort(): void {
    if (this.aborted) return;
    this.aborted = true;
    const listeners = this.#onAbort;
    this.#onAbort = undefined;
    if (listeners) for (const listener of listeners) listener();
  }
}

/** A caller waiting on a flight; one with a signal may leave before the answer. */
class Waiter {
  constructor(
    readonly reads: SharedReads,
    readonly flight: Flight,
    readonly signal: AbortSignal | undefined,
    readonly resolve: (value: unknown) => void,
    readonly reject: (error: unknown) => void,
  ) {}
}

export class SharedReads {
  readonly #inflight = new Map<string, Flight>();

  /** Calls in flight now (for tests and metrics). */
  get size(): number {
    return this.#inflight.size;
  }

  /** The flight a new caller of this identity joins, if one is under way. */
  get(identity: string): Flight | undefined {
    return this.#inflight.get(identity);
  }

  add(flight: Flight): void {
    if (flight.identity !== undefined) this.#inflight.set(flight.identity, flight);
  }

  /** One more caller of the flight: its answer, or a rejection as soon as the caller's signal aborts. */
  join<T>(flight: Flight, signal: AbortSignal | undefined): Promise<T> {
    return new Promise<T>((resolve, reject) => {
      const waiter = new Waiter(this, flight, signal, resolve as (value: unknown) => void, reject);
      flight.waiters.push(waiter);
      if (signal) watchAbort(signal, waiter);
    });
  }

  /** The flight's call ended: every caller still waiting gets its outcome. */
  settle(flight: Flight, failed: boolean, outcome: unknown): void {
    this.#remove(flight);
    for (const waiter of flight.waiters) {
      if (waiter.signal) unwatchAbort(waiter.signal, waiter);
      if (failed) waiter.reject(outcome);
      else waiter.resolve(outcome);
    }
    flight.waiters.length = 0;
  }

  leave(waiter: Waiter): void {
    const { flight, signal } = waiter;
    const index = flight.waiters.indexOf(waiter);
    if (index < 0) return;
    flight.waiters.splice(index, 1);
    if (flight.waiters.length === 0) {
      // A caller arriving now starts afresh instead of joining a call being torn down.
      this.#remove(flight);
      flight.abandoned = true;
      flight.abort();
    }
    waiter.reject(callerAborted(signal?.reason));
  }

  #remove(flight: Flight): void {
    if (flight.identity !== undefined && this.#inflight.get(flight.identity) === flight)
      this.#inflight.delete(flight.identity);
  }
}

// One 'abort' listener per signal, however many calls wait on it: a GraphQL
// request hands its one signal to every read of a batch, and a listener per read
// would stack dozens on it (Node warns past ten).
const watchers = new WeakMap<AbortSignal, Set<Waiter>>();

function watchAbort(signal: AbortSignal, waiter: Waiter): void {
  let waiting = watchers.get(signal);
  if (!waiting) {
    const set = new Set<Waiter>();
    watchers.set(signal, set);
    signal.addEventListener(
      'abort',
      () => {
        watchers.delete(signal);
        for (const each of set) each.reads.leave(each);
      },
      { once: true },
    );
    waiting = set;
  }
  waiting.add(waiter);
}

function unwatchAbort(signal: AbortSignal, waiter: Waiter): void {
  watchers.get(signal)?.delete(waiter);
}

export function callerAborted(cause: unknown, unsent = false): UpstreamUnavailableError {
  return new UpstreamUnavailableError('The upstream call was aborted.', { cause, unsent });
}

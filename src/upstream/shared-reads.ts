// Each upstream call is a flight that one or more callers wait on. Identical
// reads in flight at the same moment share one: same merchant key, same group,
// same path. The key is part of the identity, so nothing is ever shared across
// keys; it lives here only as long as the call that carries it anyway, and is
// never logged. A caller that gives up leaves on its own; the call is aborted
// only once every caller has left.
import { UpstreamUnavailableError } from '../errors.js';

/** One upstream call and the callers waiting for it. */
export class Flight {
  /** Aborts the request: when the time budget runs out, or when every caller has left. */
  readonly controller = new AbortController();
  /** Callers still waiting; those without a signal never leave. */
  waiting = 0;
  /** Every caller left before the answer. */
  abandoned = false;
  /** The call's time budget ran out. */
  timedOut = false;
  /** Settles with the call. */
  promise!: Promise<unknown>;
  /** `identity`: where the flight is listed for sharing (GETs only). */
  constructor(readonly identity: string | undefined) {}
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

  /** The flight ended or was abandoned: a caller arriving now starts afresh. */
  remove(flight: Flight): void {
    if (flight.identity !== undefined && this.#inflight.get(flight.identity) === flight) this.#inflight.delete(flight.identity);
  }

  /**
   * One more caller of the flight. Without a signal the caller gets the flight's
   * own promise; with one, a promise that rejects as soon as the signal aborts.
   */
  join<T>(flight: Flight, signal: AbortSignal | undefined): Promise<T> {
    flight.waiting += 1;
    if (!signal) return flight.promise as Promise<T>;
    return new Promise<T>((resolve, reject) => {
      const leave = () => {
        flight.waiting -= 1;
        if (flight.waiting === 0) {
          this.remove(flight);
          flight.abandoned = true;
          flight.controller.abort();
        }
        reject(callerAborted(signal.reason));
      };
      watchAbort(signal, leave);
      flight.promise.then(
        (value) => {
          unwatchAbort(signal, leave);
          resolve(value as T);
        },
        (error: unknown) => {
          unwatchAbort(signal, leave);
          reject(error);
        },
      );
    });
  }
}

// One 'abort' listener per signal, however many calls wait on it: a GraphQL
// request hands its one signal to every read of a batch, and a listener per read
// would stack dozens on it (Node warns past ten).
const watchers = new WeakMap<AbortSignal, Set<() => void>>();

function watchAbort(signal: AbortSignal, callback: () => void): void {
  let callbacks = watchers.get(signal);
  if (!callbacks) {
    const set = new Set<() => void>();
    watchers.set(signal, set);
    signal.addEventListener(
      'abort',
      () => {
        watchers.delete(signal);
        for (const waiting of set) waiting();
      },
      { once: true },
    );
    callbacks = set;
  }
  callbacks.add(callback);
}

function unwatchAbort(signal: AbortSignal, callback: () => void): void {
  watchers.get(signal)?.delete(callback);
}

export function callerAborted(cause: unknown, unsent = false): UpstreamUnavailableError {
  return new UpstreamUnavailableError('The upstream call was aborted.', { cause, unsent });
}

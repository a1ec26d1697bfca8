// Identical reads in flight at the same moment share one upstream call: same
// merchant key, same group, same path. The key is part of the identity, so
// nothing is ever shared across keys; it lives here only as long as the call
// that carries it anyway, and is never logged. A caller that gives up leaves on
// its own; the shared call is aborted only once every caller has left.
import { UpstreamUnavailableError } from '../errors.js';

interface SharedCall {
  promise: Promise<unknown>;
  controller: AbortController;
  /** Callers still waiting; those without a signal never leave. */
  waiting: number;
}

export class SharedReads {
  readonly #inflight = new Map<string, SharedCall>();

  /** Calls in flight now (for tests and metrics). */
  get size(): number {
    return this.#inflight.size;
  }

  run<T>(identity: string, signal: AbortSignal | undefined, start: (signal: AbortSignal) => Promise<T>): Promise<T> {
    if (signal?.aborted) return Promise.reject(callerAborted(signal.reason));
    let shared = this.#inflight.get(identity);
    if (!shared) {
      const controller = new AbortController();
      const call: SharedCall = { promise: Promise.resolve(), controller, waiting: 0 };
      call.promise = start(controller.signal).finally(() => {
        if (this.#inflight.get(identity) === call) this.#inflight.delete(identity);
      });
      this.#inflight.set(identity, call);
      shared = call;
    }
    shared.waiting += 1;
    if (!signal) return shared.promise as Promise<T>;
    const joined = shared;
    return new Promise<T>((resolve, reject) => {
      const leave = () => {
        joined.waiting -= 1;
        if (joined.waiting === 0) {
          // A caller arriving now starts afresh instead of joining a call being torn down.
          if (this.#inflight.get(identity) === joined) this.#inflight.delete(identity);
          joined.controller.abort();
        }
        reject(callerAborted(signal.reason));
      };
      signal.addEventListener('abort', leave, { once: true });
      joined.promise.then(
        (value) => {
          signal.removeEventListener('abort', leave);
          resolve(value as T);
        },
        (error: unknown) => {
          signal.removeEventListener('abort', leave);
          reject(error);
        },
      );
    });
  }
}

function callerAborted(cause: unknown): UpstreamUnavailableError {
  return new UpstreamUnavailableError('The upstream call was aborted.', { cause });
}

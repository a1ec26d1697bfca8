// A subscription ends when the upstream stops accepting its key (for a client
// token, the merchant key it carries): access/key-watch.ts re-confirms the keys
// of open subscriptions, and this guard, around every stream the pipeline hands
// a transport, sends one last message, an UNAUTHENTICATED error, and completes.
import type { ExecutionResult } from 'graphql';
import { keyRefusedError, type KeyWatch } from '../../access/key-watch.js';
import { toGraphQLError } from '../limits.js';

/**
 * The stream, held in the watch by `key` until it ends. An iterator object
 * rather than an async generator, and no Promise.race against a promise that
 * may never settle (each race would leave a reaction on it for the stream's
 * life): a refusal answers the pending next() itself.
 */
export function untilKeyRefused(
  source: AsyncIterableIterator<ExecutionResult>,
  watch: KeyWatch,
  key: string,
  clientToken: boolean,
): AsyncIterableIterator<ExecutionResult> {
  let finished = false;
  let refused = false;
  let waiting: ((step: IteratorResult<ExecutionResult>) => void) | undefined;
  let sourceReturned = false;
  // The source stops at once (its listener, queue and reconciliation go); its own end is not waited for.
  const stopSource = () => {
    if (sourceReturned) return;
    sourceReturned = true;
    void Promise.resolve(source.return?.()).catch(() => undefined);
  };
  const lastMessage = (): IteratorResult<ExecutionResult> => {
    finish();
    return { done: false, value: { errors: [toGraphQLError(keyRefusedError(clientToken))] } };
  };
  const release = watch.hold(key, () => {
    if (finished) return;
    refused = true;
    stopSource();
    const answer = waiting;
    waiting = undefined;
    answer?.(lastMessage());
  });
  const finish = () => {
    finished = true;
    release();
  };
  return {
    [Symbol.asyncIterator]() {
      return this;
    },
    next() {
      if (finished) return Promise.resolve({ done: true, value: undefined });
      if (refused) return Promise.resolve(lastMessage());
      return new Promise<IteratorResult<ExecutionResult>>((resolve, reject) => {
        waiting = resolve;
        source.next().then(
          (step) => {
            // A refusal already answered this next().
            if (waiting !== resolve) return;
            waiting = undefined;
            if (step.done) finish();
            resolve(step);
          },
          (error: unknown) => {
            if (waiting !== resolve) return;
            waiting = undefined;
            finish();
            reject(error);
          },
        );
      });
    },
    async return(value?: unknown) {
      finish();
      if (!sourceReturned) {
        sourceReturned = true;
        await source.return?.(value as ExecutionResult);
      }
      return { done: true, value: value as ExecutionResult };
    },
    async throw(error?: unknown) {
      finish();
      sourceReturned = true;
      if (source.throw) return source.throw(error);
      throw error;
    },
  };
}

// A client token's stream ends when the token expires: one last message says
// so, then the subscription completes. (What a token may run at all is the
// plan's clientTokenRefusal, from access/client-token-scope.ts.)
import type { ExecutionResult } from 'graphql';
import { UnauthenticatedError } from '../../errors.js';
import { toGraphQLError } from '../limits.js';

const EXPIRED = Symbol('expired');

const expiredResult = (): ExecutionResult => ({
  errors: [toGraphQLError(new UnauthenticatedError('The client token has expired; ask the merchant for a new one.'))],
});

/**
 * The stream until `expiresAt`, then one last message saying the token expired,
 * then done. An iterator object rather than an async generator, so that a client
 * that unsubscribes ends the source at once, not after its next event.
 */
export function untilExpiry(
  source: AsyncIterableIterator<ExecutionResult>,
  expiresAt: Date,
): AsyncIterableIterator<ExecutionResult> {
  const iterator = source;
  let finished = false;
  let timer: NodeJS.Timeout | undefined;
  const expiry = new Promise<typeof EXPIRED>((resolve) => {
    timer = setTimeout(() => resolve(EXPIRED), Math.max(0, expiresAt.getTime() - Date.now()));
  });
  const finish = async () => {
    if (finished) return;
    finished = true;
    clearTimeout(timer);
    await iterator.return?.();
  };
  return {
    [Symbol.asyncIterator]() {
      return this;
    },
    async next() {
      if (finished) return { done: true, value: undefined };
      const step = await Promise.race([iterator.next(), expiry]);
      if (step === EXPIRED) {
        await finish();
        return { done: false, value: expiredResult() };
      }
      if (step.done) {
        finished = true;
        clearTimeout(timer);
      }
      return step;
    },
    async return(value?: unknown) {
      await finish();
      return { done: true, value: value as ExecutionResult };
    },
    async throw(error?: unknown) {
      await finish();
      throw error;
    },
  };
}

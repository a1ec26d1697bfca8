// graphql-ws `next` frames for the shared fan-out's messages (fanout.ts). graphql-ws
// stringifies `{id, type: 'next', payload}` for every subscriber; a message
// shared by a group has its payload's text made once, so here each subscriber's
// frame is that text with its own id spliced in, written on its socket. The
// protocol is graphql-ws's own: every frame carries its subscriber's id, and
// graphql-ws still starts each operation, writes its `error`, its `complete`
// when the stream ends, and anything that is not a shared message (a stream's
// last error, a client token's expiry) itself.
import type { ExecutionResult } from 'graphql';
import { sharedText } from './fanout.js';

const DONE: IteratorResult<ExecutionResult> = { done: true, value: undefined };

/**
 * The stream as graphql-ws is handed it: each shared message is written by
 * `send` (which resolves once the socket has taken it, as graphql-ws waits for
 * each of its own: a subscriber that does not read stops pulling its stream, and
 * its queue fills as it did), and only what is not shared is yielded for
 * graphql-ws to write. Returning it (the client's `complete`, a closed socket)
 * returns the stream, and nothing more is written.
 */
export function writingSharedFrames(
  stream: AsyncIterableIterator<ExecutionResult>,
  id: string,
  send: (frame: string) => Promise<void>,
): AsyncIterableIterator<ExecutionResult> {
  // `{"id":…,"type":"next","payload":…}`, as graphql-ws's stringifyMessage orders it.
  const head = `{"id":${JSON.stringify(id)},"type":"next","payload":`;
  let returned = false;
  const pump = async (): Promise<IteratorResult<ExecutionResult>> => {
    for (;;) {
      const step = await stream.next();
      if (returned) return DONE;
      if (step.done) return step;
      const text = sharedText(step.value);
      if (text === undefined) return step;
      await send(`${head}${text}}`);
    }
  };
  return {
    [Symbol.asyncIterator]() {
      return this;
    },
    next: pump,
    return: async (value?: unknown) => {
      returned = true;
      await stream.return?.(value as ExecutionResult);
      return DONE;
    },
    throw: async (error?: unknown) => {
      returned = true;
      if (!stream.throw) throw error;
      await stream.throw(error);
      return DONE;
    },
  };
}

// A real graphql-ws client for tests: subscribe, collect what arrives, wait for it.
import { createClient, type Client } from 'graphql-ws';
import WebSocket from 'ws';

export interface Collected<T = any> {
  /** Data of each `next` message, in arrival order. */
  items: T[];
  errors: unknown[];
  completed: boolean;
  /** Resolves once `count` items arrived (or rejects after timeoutMs). */
  waitFor(count: number, timeoutMs?: number): Promise<T[]>;
  /** Resolves once an item for which `found` holds arrived (or rejects after timeoutMs). */
  waitForItem(found: (item: T) => boolean, timeoutMs?: number): Promise<T[]>;
  /** Resolves when the subscription completes or errors. */
  done: Promise<void>;
  dispose(): void;
}

export function wsClient(
  httpUrl: string,
  key: string | undefined,
  options: { onClose?: (code: number, reason: string) => void; lazy?: boolean } = {},
): Client {
  return createClient({
    url: `${httpUrl.replace(/^http/, 'ws')}/graphql`,
    webSocketImpl: WebSocket,
    connectionParams: key === undefined ? {} : { authorization: `Bearer ${key}` },
    retryAttempts: 0,
    // Lazy: the socket opens with the first subscription and closes after the last one.
    lazy: options.lazy ?? true,
    on: { closed: (event) => options.onClose?.((event as CloseEvent).code, (event as CloseEvent).reason) },
  });
}

export function collect<T = any>(client: Client, query: string, variables?: Record<string, unknown>): Collected<T> {
  const items: T[] = [];
  const errors: unknown[] = [];
  const waiters: Array<{ met: () => boolean; resolve: (items: T[]) => void }> = [];
  let finish!: () => void;
  const done = new Promise<void>((resolve) => (finish = resolve));
  const waitUntil = (met: () => boolean, what: () => string, timeoutMs: number): Promise<T[]> => {
    if (met()) return Promise.resolve(items);
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`${what()}; errors: ${JSON.stringify(errors)}`)), timeoutMs);
      waiters.push({ met, resolve: (value) => (clearTimeout(timer), resolve(value)) });
    });
  };
  const collected: Collected<T> = {
    items,
    errors,
    completed: false,
    done,
    waitFor: (count, timeoutMs = 10_000) =>
      waitUntil(
        () => items.length >= count,
        () => `got ${items.length} of ${count} items`,
        timeoutMs,
      ),
    waitForItem: (found, timeoutMs = 10_000) =>
      waitUntil(
        () => items.some(found),
        () => `none of the ${items.length} items matched`,
        timeoutMs,
      ),
    dispose: () => unsubscribe(),
  };
  const unsubscribe = client.subscribe<T>(
    { query, variables },
    {
      next: (message) => {
        if (message.errors) errors.push(...message.errors);
        if (message.data) items.push(message.data as T);
        for (const waiter of [...waiters]) {
          if (waiter.met()) {
            waiters.splice(waiters.indexOf(waiter), 1);
            waiter.resolve(items);
          }
        }
      },
      error: (error) => {
        // An `error` message brings a list of GraphQL errors; a closed socket, its CloseEvent.
        if (Array.isArray(error)) errors.push(...error);
        else errors.push(error);
        finish();
      },
      complete: () => {
        collected.completed = true;
        finish();
      },
    },
  );
  return collected;
}

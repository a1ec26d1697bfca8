// Waiting on what a test waits for, never on the clock: a listener attaching to
// the event bus, a condition coming true, or one of several calls settling first.
import type { EventBus } from '../../src/realtime/bus.js';

/** Per bus: the waiters to tell about each listener that attaches. */
const attachWatchers = new WeakMap<EventBus, Set<() => void>>();

/**
 * Resolves once `count` more listeners have attached to the bus. Every
 * subscription stream attaches its listener before it reads anything (see
 * src/realtime/streams.ts), so from then on it misses nothing published. Call it
 * before subscribing; with `count` subscriptions started, they are all live once
 * it resolves. (A subscription that ends before it attaches never counts.)
 */
export function listenersAttached(bus: EventBus, count = 1): Promise<void> {
  let watchers = attachWatchers.get(bus);
  if (!watchers) {
    const found = new Set<() => void>();
    const listen = bus.listen.bind(bus);
    // The streams look bus.listen up on this same object at each call: wrapping it here sees every attach.
    bus.listen = (uid, listener, options) => {
      const unlisten = listen(uid, listener, options);
      // The facade's own listeners (reconciliation's) are no subscription's.
      if (!options?.internal) for (const watcher of [...found]) watcher();
      return unlisten;
    };
    attachWatchers.set(bus, found);
    watchers = found;
  }
  const all = watchers;
  return new Promise((resolve) => {
    let left = count;
    const watcher = () => {
      left -= 1;
      if (left > 0) return;
      all.delete(watcher);
      resolve();
    };
    all.add(watcher);
  });
}

/** Polls `check` until it holds; fails with `what` after `timeoutMs` (a safety net, not a wait). */
export async function waitUntil(
  check: () => boolean | Promise<boolean>,
  what: string,
  timeoutMs = 10_000,
): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 5));
  }
}

/**
 * The name of the promise that settles (resolves or rejects) first. For an
 * ordering that is the point of a test: a call that must end before another one,
 * started alongside it, can.
 */
export function firstSettled(promises: Record<string, Promise<unknown>>): Promise<string> {
  return Promise.race(
    Object.entries(promises).map(([name, promise]) =>
      promise.then(
        () => name,
        () => name,
      ),
    ),
  );
}

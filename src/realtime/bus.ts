// Fan-out of stored events within this process. Each event goes to the
// listeners of its delivery's topic and to those of every event; a topic may
// have any number of them (every deliveryEvents subscription without uids
// shares the one of every event). With Redis, redis-bus.ts brings every
// instance's events here in log order.
import type { StoredEvent } from '../store/store.js';

export interface EventBus {
  publish(event: StoredEvent): void;
  /**
   * Listens to one delivery's events, or to all events; returns the unsubscribe
   * function. `internal`: the facade's own listener (reconciliation's), not a
   * subscription's: listenerCount does not count it.
   */
  listen(uid: string | undefined, listener: (event: StoredEvent) => void, options?: { internal?: boolean }): () => void;
  /** Subscriptions' listeners attached now (for leak checks and metrics). */
  listenerCount(): number;
}

type Listener = (event: StoredEvent) => void;

/** A topic's listeners, in the order they came; one listening twice is two entries. */
class Topic {
  listeners: Listener[] = [];
  /** Rounds running (a listener may publish): a listener removed meanwhile is not called, one added waits. */
  dispatching = 0;

  dispatch(event: StoredEvent): void {
    // The array is replaced, not changed, while a round runs over it.
    const round = this.listeners;
    this.dispatching += 1;
    try {
      for (const listener of round) {
        if (round !== this.listeners && !this.listeners.includes(listener)) continue;
        try {
          listener(event);
        } catch (error) {
          // As an EventTarget does: the others still get the event, and the error is still uncaught.
          process.nextTick(() => {
            throw error;
          });
        }
      }
    } finally {
      this.dispatching -= 1;
    }
  }

  add(listener: Listener): void {
    if (this.dispatching > 0) this.listeners = [...this.listeners, listener];
    else this.listeners.push(listener);
  }

  remove(listener: Listener): void {
    const index = this.listeners.indexOf(listener);
    if (index < 0) return;
    if (this.dispatching > 0) this.listeners = this.listeners.filter((_, k) => k !== index);
    else this.listeners.splice(index, 1);
  }
}

export function createEventBus(): EventBus {
  const topics = new Map<string, Topic>();
  const all = new Topic();
  let counted = 0;

  return {
    publish(event) {
      topics.get(event.uid)?.dispatch(event);
      all.dispatch(event);
    },
    listen(uid, listener, options) {
      let topic = uid === undefined ? all : topics.get(uid);
      if (!topic) topics.set(uid!, (topic = new Topic()));
      // Each listen is a subscription of its own, even of a function given before.
      const own: Listener = (event) => listener(event);
      topic.add(own);
      const isCounted = options?.internal !== true;
      if (isCounted) counted += 1;
      let attached = true;
      const listening = topic;
      return () => {
        if (!attached) return;
        attached = false;
        if (isCounted) counted -= 1;
        listening.remove(own);
        if (listening !== all && listening.listeners.length === 0 && topics.get(uid!) === listening)
          topics.delete(uid!);
      };
    },
    listenerCount: () => counted,
  };
}

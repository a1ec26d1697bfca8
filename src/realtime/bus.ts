// Fan-out of stored events on graphql-yoga's pubsub. Each event goes to the
// topic of its delivery ("delivery:<uid>") and to "events". The EventTarget holds
// one listener per topic, which hands the event to that topic's subscribers: a
// topic may have any number of them (every deliveryEvents subscriber shares
// "events"), and Node warns of a leak past ten listeners of one type on an
// EventTarget. A Redis event target can replace the target so that every
// instance hears every event.
import { createPubSub } from 'graphql-yoga';
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

export function createEventBus(target: EventTarget = new EventTarget()): EventBus {
  const pubsub = createPubSub<{ delivery: [uid: string, event: StoredEvent]; events: [event: StoredEvent] }>({
    eventTarget: target,
  });
  /** Each topic's subscribers, and the one listener on the target that calls them. */
  const topics = new Map<string, { listeners: Set<Listener>; handler: (event: Event) => void }>();
  let listeners = 0;

  const attach = (topic: string) => {
    const listeners = new Set<Listener>();
    const handler = (event: Event) => {
      const detail = (event as CustomEvent<StoredEvent>).detail;
      // A copy, so a listener that unsubscribes or subscribes another meanwhile does not disturb this event's round;
      // one removed during the round is not called, as with listeners on the target itself.
      for (const listener of [...listeners]) {
        if (!listeners.has(listener)) continue;
        try {
          listener(detail);
        } catch (error) {
          // As an EventTarget does: the others still get the event, and the error is still uncaught.
          process.nextTick(() => {
            throw error;
          });
        }
      }
    };
    const entry = { listeners, handler };
    topics.set(topic, entry);
    target.addEventListener(topic, handler);
    return entry;
  };

  return {
    publish(event) {
      pubsub.publish('delivery', event.uid, event);
      pubsub.publish('events', event);
    },
    listen(uid, listener, options) {
      const topic = uid === undefined ? 'events' : `delivery:${uid}`;
      const entry = topics.get(topic) ?? attach(topic);
      // Each listen is a subscription of its own, even of a function given before (a Set would merge them).
      const own: Listener = (event) => listener(event);
      entry.listeners.add(own);
      const counted = options?.internal !== true;
      if (counted) listeners += 1;
      let attached = true;
      return () => {
        if (!attached) return;
        attached = false;
        if (counted) listeners -= 1;
        entry.listeners.delete(own);
        if (entry.listeners.size === 0 && topics.get(topic) === entry) {
          topics.delete(topic);
          target.removeEventListener(topic, entry.handler);
        }
      };
    },
    listenerCount: () => listeners,
  };
}

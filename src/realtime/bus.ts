// Fan-out of stored events on graphql-yoga's pubsub. Each event goes to the
// topic of its delivery ("delivery:<uid>") and to "events"; subscribers attach
// listeners to the same EventTarget, which a Redis event target can replace so
// that every instance hears every event.
import { createPubSub } from 'graphql-yoga';
import type { StoredEvent } from '../store/store.js';

export interface EventBus {
  publish(event: StoredEvent): void;
  /** Listens to one delivery's events, or to all events; returns the unsubscribe function. */
  listen(uid: string | undefined, listener: (event: StoredEvent) => void): () => void;
  /** Listeners attached now (for leak checks and metrics). */
  listenerCount(): number;
}

export function createEventBus(target: EventTarget = new EventTarget()): EventBus {
  const pubsub = createPubSub<{ delivery: [uid: string, event: StoredEvent]; events: [event: StoredEvent] }>({ eventTarget: target });
  let listeners = 0;
  return {
    publish(event) {
      pubsub.publish('delivery', event.uid, event);
      pubsub.publish('events', event);
    },
    listen(uid, listener) {
      const topic = uid === undefined ? 'events' : `delivery:${uid}`;
      const handler = (event: Event) => listener((event as CustomEvent<StoredEvent>).detail);
      target.addEventListener(topic, handler);
      listeners += 1;
      let attached = true;
      return () => {
        if (!attached) return;
        attached = false;
        listeners -= 1;
        target.removeEventListener(topic, handler);
      };
    },
    listenerCount: () => listeners,
  };
}

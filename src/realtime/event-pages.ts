// Delivery.events inside a subscription: every subscriber of a delivery that
// selects it would read the same page of the store for the same message. Here a
// page is read once per message and handed to every subscriber of that message:
// a delivery's events are the same for everyone allowed to see the delivery,
// and that was decided before the message reached them (the cursors are then
// made per caller, from the seqs).
//
// A page read for a message (an event, or a snapshot) holds every event of the
// delivery up to that message's seq: the subscriber heard the event after it was
// stored. So a page kept as read for seq N answers any message at or below N,
// and a later message reads anew and takes its place. One page is kept per
// (delivery, after, first), the least recently used going first past
// MAX_BYTES; nothing listens for new events and nothing expires on a timer.
import { LRUCache } from 'lru-cache';
import type { Store, StoredEvent } from '../store/store.js';

/** Heap all kept pages may hold, by their weight (weighPage). */
const MAX_BYTES = 32 * 2 ** 20;

/** Store reads made and saved, since start (for tests and probes). */
export interface EventPageCounters {
  reads: number;
  shared: number;
}

interface Page {
  /** The highest message seq it was read for: it answers any at or below. */
  asOf: number;
  events: readonly StoredEvent[];
  bytes: number;
}

/**
 * What a page holds in the heap, counted from its payloads' JSON text: at most
 * 8 bytes a character (a payload of many small objects or distinct keys takes
 * about 6; plain text 1 to 2), and 400 bytes for each event's own fields and
 * objects. test/unit/event-pages.test.ts measures it against the heap.
 */
export function weighPage(events: readonly StoredEvent[]): number {
  let bytes = 0;
  for (const event of events) bytes += 400 + 8 * JSON.stringify(event.payload).length;
  return bytes;
}

export class EventPages {
  readonly #kept: LRUCache<string, Page>;
  /** Reads under way, by the same id: asked again meanwhile, the same read answers. */
  readonly #reading = new Map<string, { asOf: number; events: Promise<readonly StoredEvent[]> }>();
  readonly counters: EventPageCounters = { reads: 0, shared: 0 };

  constructor(
    private readonly store: Store,
    maxBytes = MAX_BYTES,
  ) {
    this.#kept = new LRUCache<string, Page>({ maxSize: maxBytes, sizeCalculation: (page) => Math.max(1, page.bytes) });
  }

  /**
   * The events of `uid` after `afterSeq`, at most `limit`, as read for the
   * message whose seq is `messageSeq` or a later one.
   */
  page(uid: string, messageSeq: number, afterSeq: number, limit: number): Promise<readonly StoredEvent[]> {
    const id = `${uid}\n${afterSeq}\n${limit}`;
    const kept = this.#kept.get(id);
    if (kept && messageSeq <= kept.asOf) {
      this.counters.shared += 1;
      return Promise.resolve(kept.events);
    }
    const reading = this.#reading.get(id);
    if (reading && messageSeq <= reading.asOf) {
      this.counters.shared += 1;
      return reading.events;
    }
    this.counters.reads += 1;
    const events = this.store.eventsAfter(afterSeq, limit, { uids: [uid] });
    const entry = { asOf: messageSeq, events };
    this.#reading.set(id, entry);
    const done = () => {
      if (this.#reading.get(id) === entry) this.#reading.delete(id);
    };
    events.then((page) => {
      done();
      // A read for a later message may have finished first: the page for the latest message stays.
      const current = this.#kept.peek(id);
      if (!current || current.asOf <= messageSeq)
        this.#kept.set(id, { asOf: messageSeq, events: page, bytes: weighPage(page) });
    }, done);
    return events;
  }

  /** Pages kept now and their weight. */
  get size(): { entries: number; bytes: number } {
    return { entries: this.#kept.size, bytes: this.#kept.calculatedSize };
  }
}

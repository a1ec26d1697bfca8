// Delivery.events in a subscription: one store read per message for every
// subscriber of it (src/realtime/event-pages.ts), a later message reads anew, and
// the pages kept are weighed at or above the heap they hold.
import { runInNewContext } from 'node:vm';
import { setFlagsFromString } from 'node:v8';
import { describe, expect, it } from 'vitest';
import { EventPages, weighPage } from '../../src/realtime/event-pages.js';
import type { Store, StoredEvent } from '../../src/store/store.js';

setFlagsFromString('--expose-gc');
const gc = runInNewContext('gc') as () => void;

function event(seq: number, uid: string, payload: Record<string, unknown> = {}): StoredEvent {
  return {
    seq,
    uid,
    name: 'delivery.assigned',
    statusText: 'Assigned',
    receivedAt: '2030-05-01T10:00:00.000Z',
    stale: false,
    courierOnly: false,
    payload: { uid, event_name: 'delivery.assigned', ...payload },
  };
}

/** A store of events in memory that counts its page reads; `fail` makes the next read fail. */
function countingStore(events: StoredEvent[]) {
  const reads: Array<{ afterSeq: number; limit: number; uids: readonly string[] | undefined }> = [];
  let fail = false;
  const store = {
    async eventsAfter(afterSeq: number, limit: number, filter?: { uids?: readonly string[] }) {
      reads.push({ afterSeq, limit, uids: filter?.uids });
      if (fail) {
        fail = false;
        throw new Error('store down');
      }
      return events
        .filter((stored) => stored.seq > afterSeq && (!filter?.uids || filter.uids.includes(stored.uid)))
        .slice(0, limit);
    },
  } as unknown as Store;
  return { store, reads, failNext: () => (fail = true) };
}

describe('EventPages', () => {
  it('reads a page once for every subscriber of a message, at once or later, and anew for a later message', async () => {
    const log = [event(1, 'a'), event(2, 'b'), event(3, 'a')];
    const { store, reads } = countingStore(log);
    const pages = new EventPages(store);
    // Thirty subscribers of message 3 of delivery a: together, and after the read.
    const together = await Promise.all(Array.from({ length: 20 }, () => pages.page('a', 3, 0, 501)));
    const after = await Promise.all(Array.from({ length: 10 }, () => pages.page('a', 3, 0, 501)));
    expect(reads).toEqual([{ afterSeq: 0, limit: 501, uids: ['a'] }]);
    for (const page of [...together, ...after]) expect(page.map((stored) => stored.seq)).toEqual([1, 3]);
    // A subscriber still on an earlier message is answered by the page of a later one (it holds more).
    expect((await pages.page('a', 1, 0, 501)).map((stored) => stored.seq)).toEqual([1, 3]);
    expect(reads).toHaveLength(1);

    // The next event: its message reads the page anew, once.
    log.push(event(4, 'a'));
    const next = await Promise.all(Array.from({ length: 5 }, () => pages.page('a', 4, 0, 501)));
    expect(reads).toHaveLength(2);
    for (const page of next) expect(page.map((stored) => stored.seq)).toEqual([1, 3, 4]);

    // Another delivery, another `after` or another `first` is another page.
    await pages.page('b', 4, 0, 501);
    await pages.page('a', 4, 1, 501);
    await pages.page('a', 4, 0, 11);
    expect(reads.map((read) => [read.uids, read.afterSeq, read.limit])).toEqual([
      [['a'], 0, 501],
      [['a'], 0, 501],
      [['b'], 0, 501],
      [['a'], 1, 501],
      [['a'], 0, 11],
    ]);
    expect(pages.counters).toEqual({ reads: 5, shared: 34 });
  });

  it('keeps no failed read: the next subscriber reads again', async () => {
    const { store, reads, failNext } = countingStore([event(1, 'a')]);
    const pages = new EventPages(store);
    failNext();
    const failing = Promise.all([pages.page('a', 1, 0, 501), pages.page('a', 1, 0, 501)]);
    await expect(failing).rejects.toThrow('store down');
    expect((await pages.page('a', 1, 0, 501)).map((stored) => stored.seq)).toEqual([1]);
    expect(reads).toHaveLength(2);
  });

  it('keeps pages up to its bytes, by their weight, the least recently used going first', async () => {
    const log = Array.from({ length: 40 }, (_, i) =>
      event(i + 1, `d${String(i).padStart(2, '0')}`, { package_description: 'x'.repeat(1000) }),
    );
    const { store, reads } = countingStore(log);
    const oneWeight = weighPage([log[0]!]);
    const pages = new EventPages(store, oneWeight * 10);
    for (const stored of log) await pages.page(stored.uid, stored.seq, 0, 501);
    expect(pages.size.entries).toBe(10);
    expect(pages.size.bytes).toBeLessThanOrEqual(oneWeight * 10);
    // The ten used last are kept; the first are gone and read again.
    await pages.page('d39', 40, 0, 501);
    await pages.page('d00', 1, 0, 501);
    expect(reads).toHaveLength(41);
  });
});

describe('weighPage', () => {
  // Payload shapes: what a webhook carries, and what costs the heap most per character of JSON.
  const shapes: Record<string, () => Record<string, unknown>> = {
    minimal: () => ({ status: 'Assigned' }),
    typical: () => ({
      status: 'En route',
      price: { amount: 12.5, currency: 'USD' },
      tip: 3.5,
      pickup_name: 'Ada Shop',
      pickup_address: {
        street: 'Main St',
        number: '1',
        city: 'Springfield',
        country: 'US',
        postal_code: '12345',
        lat: 52.1,
        lng: 13.2,
      },
      dropoff_address: {
        street: 'Elm St',
        number: '42',
        city: 'Springfield',
        country: 'US',
        postal_code: '12345',
        lat: 52.2,
        lng: 13.3,
      },
      driver_id: 17,
      driver_name: 'Sam Driver',
      driver_location: { lat: 52.15, lng: 13.25 },
      items: [
        { name: 'Book', quantity: 1 },
        { name: 'Other book', quantity: 1 },
      ],
      platform_payload: { orderId: 'A-1', nested: { ok: true } },
    }),
    'small objects and numbers': () => ({
      items: Array.from({ length: 100 }, (_, i) => ({ a: i, b: i + 0.5, c: [1, 2] })),
    }),
    'distinct keys': () => ({
      platform_payload: Object.fromEntries(
        Array.from({ length: 200 }, (_, i) => [`k${i}x${Math.random().toString(36).slice(2, 6)}`, i]),
      ),
    }),
    'two-byte text': () => ({ package_description: 'Ünïcödé Ω ✓ 配達 '.repeat(100) }),
    'long text': () => ({ package_description: 'x'.repeat(2000), dropoff_instructions: 'y'.repeat(2000) }),
  };

  for (const [shape, make] of Object.entries(shapes)) {
    it(`weighs a page of "${shape}" payloads at or above the heap it holds, and within 10 times it`, () => {
      const COUNT = 2000;
      // As a store hands them out: parsed from their stored text.
      const texts = Array.from({ length: COUNT }, (_, i) => JSON.stringify(event(i + 1, `uid-${i}`, make())));
      gc();
      gc();
      const before = process.memoryUsage().heapUsed;
      const page = texts.map((text) => JSON.parse(text) as StoredEvent);
      gc();
      gc();
      const held = process.memoryUsage().heapUsed - before;
      const weight = weighPage(page);
      expect(page).toHaveLength(COUNT);
      expect(weight, `${shape}: weight ${weight}, heap ${held}`).toBeGreaterThanOrEqual(held);
      expect(weight, `${shape}: weight ${weight}, heap ${held}`).toBeLessThanOrEqual(held * 10);
    });
  }
});

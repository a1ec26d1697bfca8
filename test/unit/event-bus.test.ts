// The in-process event bus: any number of subscribers of one topic (every
// deliveryEvents subscription shares "events"), with no warning of a leak.
import { describe, expect, it } from 'vitest';
import { createEventBus } from '../../src/realtime/bus.js';
import type { StoredEvent } from '../../src/store/store.js';

const event = (seq: number, uid: string) => ({ seq, uid, name: 'delivery.created' }) as unknown as StoredEvent;

describe('createEventBus', () => {
  it('hands each event to 50 subscribers of its delivery and 50 of every event, with no warning', async () => {
    const warnings: string[] = [];
    const onWarning = (warning: Error) => warnings.push(`${warning.name}: ${warning.message}`);
    process.on('warning', onWarning);
    try {
      const bus = createEventBus();
      const heard = { one: 0, all: 0 };
      const stops = [
        ...Array.from({ length: 50 }, () => bus.listen('u1', () => (heard.one += 1))),
        ...Array.from({ length: 50 }, () => bus.listen(undefined, () => (heard.all += 1))),
      ];
      expect(bus.listenerCount()).toBe(100);
      bus.publish(event(1, 'u1'));
      bus.publish(event(2, 'u2'));
      expect(heard).toEqual({ one: 50, all: 100 });
      for (const stop of stops) stop();
      expect(bus.listenerCount()).toBe(0);
      bus.publish(event(3, 'u1'));
      expect(heard).toEqual({ one: 50, all: 100 });
      // Warnings are emitted on the next tick.
      await new Promise((resolve) => setImmediate(resolve));
    } finally {
      process.off('warning', onWarning);
    }
    expect(warnings).toEqual([]);
  });

  it('counts the same function listening twice as two subscriptions, and skips one stopped during a round', () => {
    const bus = createEventBus();
    const calls: string[] = [];
    const listener = () => calls.push('same');
    bus.listen('u1', listener);
    const second = bus.listen('u1', listener);
    let stopLater: () => void = () => {};
    bus.listen('u1', () => {
      calls.push('stopper');
      stopLater();
    });
    stopLater = bus.listen('u1', () => calls.push('stopped'));
    second();
    bus.publish(event(1, 'u1'));
    expect(calls).toEqual(['same', 'stopper']);
  });
});

// The lifecycle rule of src/domain/milestones.ts: milestone order, the return
// path after a cancel or failure once the package was picked up, what is final,
// duplicates and positions; and the status an event gives its delivery, read
// from its event_name rather than its human-readable label.
import { describe, expect, it } from 'vitest';
import { courierIdentity, eventFacts, stateOfStatus, transition, type MilestoneState } from '../../src/domain/milestones.js';
import { fromWebhookEvent } from '../../src/mapping/delivery.js';
import { statusOfWebhook } from '../../src/domain/status.js';

const PATH = [
  'delivery.created',
  'delivery.assigned',
  'delivery.pickup_enroute',
  'delivery.pickup_arrived',
  'delivery.pickup_complete',
  'delivery.dropoff_enroute',
  'delivery.dropoff_arrived',
  'delivery.dropoff_complete',
];
const BEFORE_PICKUP = PATH.slice(0, 4);
const AFTER_PICKUP = PATH.slice(4, 7);

/** Feeds the events in order; returns each one's stale flag and the state at the end. */
function run(names: readonly string[], start?: MilestoneState): { stale: boolean[]; state: MilestoneState | undefined } {
  let state = start;
  const stale: boolean[] = [];
  for (const name of names) {
    const step = transition(state, name);
    stale.push(step.stale);
    state = step.state;
  }
  return { stale, state };
}

const stateAfter = (...names: string[]) => run(names).state;

describe('milestone order', () => {
  it('accepts the whole lifecycle in order and ends at dropoff_complete', () => {
    const { stale, state } = run(PATH);
    expect(stale).toEqual(PATH.map(() => false));
    expect(state).toEqual({ rank: 7, terminal: true });
    // Only the last one is final.
    for (let i = 0; i < PATH.length - 1; i += 1) expect(stateAfter(...PATH.slice(0, i + 1))?.terminal).toBe(false);
  });

  const pairs = PATH.flatMap((earlier, i) => PATH.slice(i + 1).map((later) => [earlier, later] as const));
  it.each(pairs)('after %s, %s moves forward; the other way round the earlier one is stale', (earlier, later) => {
    expect(transition(stateAfter(earlier), later).stale).toBe(false);
    const ahead = stateAfter(later);
    expect(transition(ahead, earlier)).toEqual({ stale: true, courierOnly: false, state: ahead });
  });

  it('skips milestones that never arrived (a later one may come first)', () => {
    expect(run(['delivery.created', 'delivery.pickup_complete', 'delivery.assigned', 'delivery.dropoff_complete']).stale).toEqual([false, false, true, false]);
  });

  it('takes any event first: there is no state before the first event', () => {
    for (const name of PATH) expect(transition(undefined, name).stale).toBe(false);
  });
});

describe('the return path', () => {
  it.each(['delivery.failed', 'delivery.canceled'])('after pickup, %s is followed by return_in_progress and returned, which ends it', (notDelivered) => {
    for (const reached of AFTER_PICKUP) {
      const upTo = PATH.slice(0, PATH.indexOf(reached) + 1);
      const { stale, state } = run([...upTo, notDelivered, 'location.return_in_progress', 'delivery.return_in_progress', 'location.return_in_progress', 'delivery.returned']);
      expect(stale.every((s) => !s)).toBe(true);
      expect(state).toEqual({ rank: 10, terminal: true });
      // The cancel or failure itself is not final; the return is not final until returned.
      expect(stateAfter(...upTo, notDelivered)).toEqual({ rank: 8, terminal: false });
      expect(stateAfter(...upTo, notDelivered, 'delivery.return_in_progress')).toEqual({ rank: 9, terminal: false });
    }
  });

  it('after a failure past pickup, late dropoff events, a second cancel or failure, and earlier positions are stale', () => {
    const failed = stateAfter('delivery.pickup_complete', 'delivery.dropoff_enroute', 'delivery.failed');
    for (const late of ['delivery.dropoff_enroute', 'delivery.dropoff_arrived', 'delivery.dropoff_complete', 'delivery.pickup_complete', 'delivery.failed', 'delivery.canceled', 'location.dropoff_enroute', 'location.pickup_complete']) {
      expect(transition(failed, late), late).toEqual({ stale: true, courierOnly: false, state: failed });
    }
    const returning = transition(failed, 'delivery.return_in_progress').state;
    for (const late of ['delivery.failed', 'delivery.canceled', 'delivery.dropoff_complete', 'delivery.return_in_progress']) {
      expect(transition(returning, late).stale, late).toBe(true);
    }
  });

  it('accepts a return that arrives before the failure it follows; the failure is then late', () => {
    const { stale, state } = run(['delivery.pickup_complete', 'delivery.return_in_progress', 'delivery.failed', 'delivery.returned']);
    expect(stale).toEqual([false, false, true, false]);
    expect(state).toEqual({ rank: 10, terminal: true });
  });

  it.each(['delivery.failed', 'delivery.canceled'])('%s before pickup is final: a later return_in_progress or returned is stale', (notDelivered) => {
    for (const starts of [[], ...BEFORE_PICKUP.map((_, i) => BEFORE_PICKUP.slice(0, i + 1))]) {
      const ended = stateAfter(...starts, notDelivered);
      expect(ended, starts.join(' ')).toEqual({ rank: 8, terminal: true });
      for (const late of ['delivery.return_in_progress', 'delivery.returned', 'location.return_in_progress', 'delivery.pickup_complete', 'delivery.mystery']) {
        expect(transition(ended, late), late).toEqual({ stale: true, courierOnly: false, state: ended });
      }
    }
  });

  it('is over at returned and at dropoff_complete: nothing counts after either', () => {
    for (const ended of [stateAfter('delivery.pickup_complete', 'delivery.failed', 'delivery.returned'), stateAfter('delivery.dropoff_complete')]) {
      for (const late of [...PATH, 'delivery.return_in_progress', 'delivery.returned', 'delivery.canceled', 'delivery.failed', 'location.return_in_progress', 'delivery.mystery']) {
        expect(transition(ended, late).stale, late).toBe(true);
      }
    }
  });
});

describe('duplicates and positions', () => {
  it('a delivery.* event repeating the current milestone is stale; a position repeating it is not', () => {
    for (const name of [...PATH.slice(0, -1), 'delivery.return_in_progress']) {
      const state = name === 'delivery.return_in_progress' ? stateAfter('delivery.pickup_complete', name) : stateAfter(name);
      expect(transition(state, name).stale, name).toBe(true);
    }
    const enroute = stateAfter('delivery.dropoff_enroute');
    expect(transition(enroute, 'location.dropoff_enroute')).toEqual({ stale: false, courierOnly: false, state: enroute });
    expect(transition(enroute, 'Location.Dropoff_Enroute').stale).toBe(false);
  });

  it('positions never move the state, and one from an earlier milestone is stale', () => {
    const arrived = stateAfter('delivery.pickup_arrived');
    expect(transition(arrived, 'location.dropoff_enroute')).toEqual({ stale: false, courierOnly: false, state: arrived });
    expect(transition(arrived, 'location.pickup_enroute')).toEqual({ stale: true, courierOnly: false, state: arrived });
    expect(transition(arrived, 'location.assigned_driver').stale).toBe(true);
    expect(transition(undefined, 'location.pickup_enroute')).toEqual({ stale: false, courierOnly: false, state: undefined });
  });

  it('location.return_in_progress is fine during a return and after a failure past pickup', () => {
    const failed = stateAfter('delivery.pickup_complete', 'delivery.failed');
    expect(transition(failed, 'location.return_in_progress')).toEqual({ stale: false, courierOnly: false, state: failed });
    const returning = stateAfter('delivery.pickup_complete', 'delivery.failed', 'delivery.return_in_progress');
    expect(transition(returning, 'location.return_in_progress')).toEqual({ stale: false, courierOnly: false, state: returning });
    expect(transition(returning, 'location.dropoff_arrived').stale).toBe(true);
  });

  it('an unknown milestone is never ranked and moves nothing, but is stale after a final state', () => {
    const enroute = stateAfter('delivery.pickup_enroute');
    expect(transition(enroute, 'delivery.teleported')).toEqual({ stale: false, courierOnly: false, state: enroute });
    expect(transition(undefined, 'delivery.teleported')).toEqual({ stale: false, courierOnly: false, state: undefined });
    expect(transition(enroute, 'ping')).toEqual({ stale: false, courierOnly: false, state: enroute });
    expect(transition(stateAfter('delivery.canceled'), 'ping').stale).toBe(true);
  });

  it('reads event names in any case', () => {
    expect(run(['Delivery.Pickup_Complete', 'DELIVERY.FAILED', 'delivery.RETURN_IN_PROGRESS', 'delivery.assigned']).stale).toEqual([false, false, false, true]);
    expect(stateAfter('DELIVERY.PICKUP_COMPLETE', 'Delivery.Failed')).toEqual({ rank: 8, terminal: false });
  });
});

describe('what the Redis script is told, and snapshots', () => {
  it('gives each event its rank, whether it moves the state, and when it is final', () => {
    expect(eventFacts('delivery.dropoff_complete')).toEqual({ rank: 7, moves: true, final: 'always' });
    expect(eventFacts('delivery.failed')).toEqual({ rank: 8, moves: true, final: 'before_pickup' });
    expect(eventFacts('delivery.canceled')).toEqual({ rank: 8, moves: true, final: 'before_pickup' });
    expect(eventFacts('delivery.return_in_progress')).toEqual({ rank: 9, moves: true, final: 'never' });
    expect(eventFacts('delivery.returned')).toEqual({ rank: 10, moves: true, final: 'always' });
    expect(eventFacts('location.assigned_driver')).toEqual({ rank: 1, moves: false, final: 'never' });
    expect(eventFacts('delivery.mystery')).toEqual({ rank: undefined, moves: true, final: 'never' });
  });

  it('takes a status read from the upstream as a state; a read cancel or failure counts as final', () => {
    expect(stateOfStatus('PICKUP_COMPLETE')).toEqual({ rank: 4, terminal: false });
    expect(stateOfStatus('RETURN_IN_PROGRESS')).toEqual({ rank: 9, terminal: false });
    expect(stateOfStatus('FAILED')).toEqual({ rank: 8, terminal: true });
    expect(stateOfStatus('RETURNED')).toEqual({ rank: 10, terminal: true });
    expect(stateOfStatus('UNKNOWN')).toBeUndefined();
  });
});

describe('the status an event gives its delivery', () => {
  it('comes from event_name, whatever the human-readable label says', () => {
    const collected = fromWebhookEvent({ uid: 'u', event_name: 'delivery.pickup_complete', status: 'Package collected' });
    expect(collected.status).toBe('PICKUP_COMPLETE');
    expect(collected.rawStatus).toBe('Package collected');
    // A label naming another milestone does not win over the name either.
    expect(fromWebhookEvent({ uid: 'u', event_name: 'delivery.return_in_progress', status: 'Failed' }).status).toBe('RETURN_IN_PROGRESS');
    expect(fromWebhookEvent({ uid: 'u', event_name: 'location.assigned_driver', status: null }).status).toBe('ASSIGNED');
    expect(statusOfWebhook('delivery.returned', 'Back at the shop')).toBe('RETURNED');
  });

  it('falls back to the label only for an event name the facade does not know', () => {
    expect(fromWebhookEvent({ uid: 'u', event_name: 'delivery.teleported', status: 'Picked Up' }).status).toBe('PICKUP_COMPLETE');
    expect(fromWebhookEvent({ uid: 'u', event_name: 'delivery.teleported', status: 'Beamed' }).status).toBe('UNKNOWN');
    expect(statusOfWebhook(undefined, 'Delivered')).toBe('DROPOFF_COMPLETE');
  });
});

describe('couriers', () => {
  const ana = { id: '1', name: 'Ana Costa' };
  const ben = { id: '2', name: 'Ben Okafor' };
  const enroute = transition(transition(undefined, 'delivery.assigned', ana).state, 'delivery.pickup_enroute', ana).state;

  it('a delivery.* event naming another courier changes the courier alone when its milestone is late or a repeat', () => {
    expect(transition(enroute, 'delivery.assigned', ben)).toEqual({
      stale: false,
      courierOnly: true,
      state: { rank: 2, terminal: false, courier: ben, formerCouriers: [ana] },
    });
    expect(transition(enroute, 'delivery.pickup_enroute', ben).courierOnly).toBe(true);
    // The same courier on a late milestone is stale as before.
    expect(transition(enroute, 'delivery.assigned', ana)).toEqual({ stale: true, courierOnly: false, state: enroute });
  });

  it('after a change, the replaced courier is stale, positions of a courier not announced are stale, and a final state ends it all', () => {
    const changed = transition(enroute, 'delivery.assigned', ben).state;
    for (const name of ['location.pickup_enroute', 'delivery.pickup_enroute', 'delivery.pickup_arrived']) expect(transition(changed, name, ana).stale, name).toBe(true);
    expect(transition(changed, 'location.pickup_enroute', ben).stale).toBe(false);
    expect(transition(enroute, 'location.pickup_enroute', ben).stale).toBe(true);
    expect(transition(stateAfter('delivery.dropoff_complete'), 'delivery.assigned', ben).stale).toBe(true);
  });

  it('compares by driver_id when both events carry one, else by name', () => {
    expect(transition(enroute, 'delivery.assigned', { id: '1', name: 'A. Costa' }).stale).toBe(true);
    expect(transition(enroute, 'delivery.assigned', { id: null, name: 'Ana Costa' }).stale).toBe(true);
    expect(transition(enroute, 'delivery.assigned', { id: null, name: 'Ben Okafor' }).courierOnly).toBe(true);
    expect(courierIdentity({ driver_id: 7, driver_name: '' })).toEqual({ id: '7', name: null });
    expect(courierIdentity({ driver_id: null, driver_name: null })).toBeUndefined();
  });
});

// The lifecycle rule of src/domain/milestones.ts: milestone order, evidence of
// pickup, the return path, what is final and when a read decides, duplicates and
// positions; and the status an event gives its delivery, read from its
// event_name rather than its human-readable label.
import { describe, expect, it } from 'vitest';
import {
  advance,
  awaitsConfirmation,
  courierIdentity,
  eventFacts,
  stateAfter,
  stateOfStatus,
  transition,
  type MilestoneState,
  type ReadFacts,
} from '../../src/domain/milestones.js';
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

/** An event, or a poll event made from a read (name, read facts). */
type Step = string | [name: string, read: ReadFacts];

/** Feeds the events in order (seq 1, 2, …); returns each one's stale and contradicts flags and the state at the end. */
function run(
  steps: readonly Step[],
  start?: MilestoneState,
): { stale: boolean[]; contradicts: boolean[]; state: MilestoneState | undefined } {
  let state = start;
  const stale: boolean[] = [];
  const contradicts: boolean[] = [];
  steps.forEach((step, index) => {
    const [name, read] = typeof step === 'string' ? [step, undefined] : step;
    const next = advance(state, eventFacts(name, undefined, read), index + 1);
    stale.push(next.stale);
    contradicts.push(next.contradicts);
    state = next.state;
  });
  return { stale, contradicts, state };
}

const stateAfterNames = (...steps: Step[]) => run(steps).state;
/** A read made after everything so far (its basis is the last seq): it is newer than the state. */
const read = (name: string, confirm = false): Step => [name, { basis: Number.MAX_SAFE_INTEGER, confirm }];
/** What a state looks like, without the seq of its last mover. */
const shape = (state: MilestoneState | undefined) => {
  if (!state) return state;
  const { seq: _seq, ...rest } = state;
  return rest;
};

describe('milestone order', () => {
  it('accepts the whole lifecycle in order and ends at dropoff_complete', () => {
    const { stale, state } = run(PATH);
    expect(stale).toEqual(PATH.map(() => false));
    expect(state).toEqual({ rank: 7, terminal: true, pickedUp: true, seq: 8 });
    // Only the last one is final.
    for (let i = 0; i < PATH.length - 1; i += 1) expect(stateAfterNames(...PATH.slice(0, i + 1))?.terminal).toBe(false);
  });

  const pairs = PATH.flatMap((earlier, i) => PATH.slice(i + 1).map((later) => [earlier, later] as const));
  it.each(pairs)('after %s, %s moves forward; the other way round the earlier one is stale', (earlier, later) => {
    expect(transition(stateAfterNames(earlier), later).stale).toBe(false);
    const ahead = stateAfterNames(later);
    expect(transition(ahead, earlier)).toEqual({
      stale: true,
      courierOnly: false,
      moved: false,
      contradicts: false,
      state: ahead,
    });
  });

  it('skips milestones that never arrived (a later one may come first)', () => {
    expect(
      run(['delivery.created', 'delivery.pickup_complete', 'delivery.assigned', 'delivery.dropoff_complete']).stale,
    ).toEqual([false, false, true, false]);
  });

  it('takes any event first: there is no state before the first event', () => {
    for (const name of PATH) expect(transition(undefined, name).stale).toBe(false);
  });

  it("the state a moving event makes is written with its seq; anything else keeps the last mover's", () => {
    expect(
      run(['delivery.assigned', 'delivery.pickup_enroute', 'delivery.assigned', 'location.pickup_enroute']).state?.seq,
    ).toBe(2);
  });
});

describe('the return path', () => {
  it.each(['delivery.failed', 'delivery.canceled'])(
    'after pickup, %s is followed by return_in_progress and returned, which ends it',
    (notDelivered) => {
      for (const reached of AFTER_PICKUP) {
        const upTo = PATH.slice(0, PATH.indexOf(reached) + 1);
        const { stale, state } = run([
          ...upTo,
          notDelivered,
          'location.return_in_progress',
          'delivery.return_in_progress',
          'location.return_in_progress',
          'delivery.returned',
        ]);
        expect(stale.every((s) => !s)).toBe(true);
        expect(shape(state)).toEqual({ rank: 10, terminal: true, pickedUp: true });
        // The cancel or failure itself is not final; the return is not final until returned.
        expect(shape(stateAfterNames(...upTo, notDelivered))).toEqual({ rank: 8, terminal: false, pickedUp: true });
        expect(shape(stateAfterNames(...upTo, notDelivered, 'delivery.return_in_progress'))).toEqual({
          rank: 9,
          terminal: false,
          pickedUp: true,
        });
      }
    },
  );

  it('after a failure past pickup, late pickup events, a second cancel or failure, and earlier positions are stale; a late dropoff contradicts it', () => {
    const failed = stateAfterNames('delivery.pickup_complete', 'delivery.dropoff_enroute', 'delivery.failed');
    for (const late of [
      'delivery.pickup_complete',
      'delivery.failed',
      'delivery.canceled',
      'location.dropoff_enroute',
      'location.pickup_complete',
    ]) {
      expect(transition(failed, late), late).toEqual({
        stale: true,
        courierOnly: false,
        moved: false,
        contradicts: false,
        state: failed,
      });
    }
    // A dropoff after a failure is a late one or a second attempt: stale, and a read is to settle it.
    for (const dropoff of ['delivery.dropoff_enroute', 'delivery.dropoff_arrived', 'delivery.dropoff_complete']) {
      expect(transition(failed, dropoff), dropoff).toEqual({
        stale: true,
        courierOnly: false,
        moved: false,
        contradicts: true,
        state: failed,
      });
    }
    const returning = transition(failed, 'delivery.return_in_progress').state;
    for (const late of ['delivery.failed', 'delivery.canceled', 'delivery.return_in_progress'])
      expect(transition(returning, late).stale, late).toBe(true);
    expect(transition(returning, 'delivery.dropoff_complete')).toMatchObject({ stale: true, contradicts: true });
  });

  it('accepts a return that arrives before the failure it follows; the failure is then late', () => {
    const { stale, state } = run([
      'delivery.pickup_complete',
      'delivery.return_in_progress',
      'delivery.failed',
      'delivery.returned',
    ]);
    expect(stale).toEqual([false, false, true, false]);
    expect(shape(state)).toEqual({ rank: 10, terminal: true, pickedUp: true });
  });

  it.each(['delivery.failed', 'delivery.canceled'])(
    '%s before pickup is not final: a return that follows is applied, since a return proves the pickup',
    (notDelivered) => {
      for (const starts of [[], ...BEFORE_PICKUP.map((_, i) => BEFORE_PICKUP.slice(0, i + 1))]) {
        const ended = stateAfterNames(...starts, notDelivered);
        expect(shape(ended), starts.join(' ')).toEqual({ rank: 8, terminal: false });
        expect(awaitsConfirmation(ended)).toBe(true);
        const { stale, state } = run([
          ...starts,
          notDelivered,
          'location.return_in_progress',
          'delivery.return_in_progress',
          'delivery.returned',
        ]);
        expect(stale.slice(starts.length)).toEqual([false, false, false, false]);
        expect(shape(state)).toEqual({ rank: 10, terminal: true, pickedUp: true });
      }
    },
  );

  it('the reordered cancel: a retried pickup_complete after the cancel is late, proves the pickup, and the return is applied', () => {
    const names = [
      'delivery.assigned',
      'delivery.pickup_enroute',
      'delivery.pickup_arrived',
      'delivery.canceled',
      'delivery.pickup_complete',
      'delivery.return_in_progress',
      'delivery.returned',
    ];
    const { stale, contradicts, state } = run(names);
    expect(stale).toEqual([false, false, false, false, true, false, false]);
    expect(contradicts.every((c) => !c)).toBe(true);
    expect(shape(state)).toEqual({ rank: 10, terminal: true, pickedUp: true });
    // Before the return, the late pickup already made the cancel one after pickup: no read may confirm it final now.
    const canceled = stateAfterNames(...names.slice(0, 5));
    expect(shape(canceled)).toEqual({ rank: 8, terminal: false, pickedUp: true });
    expect(awaitsConfirmation(canceled)).toBe(false);
    expect(transition(canceled, 'delivery.canceled', undefined, { basis: 99, confirm: true }).stale).toBe(true);
  });

  it('is over at returned and at dropoff_complete: nothing moves either; a change of branch contradicts', () => {
    const returned = stateAfterNames('delivery.pickup_complete', 'delivery.failed', 'delivery.returned');
    const delivered = stateAfterNames('delivery.dropoff_complete');
    for (const ended of [returned, delivered]) {
      for (const late of [
        ...PATH,
        'delivery.return_in_progress',
        'delivery.returned',
        'delivery.canceled',
        'delivery.failed',
        'location.return_in_progress',
        'delivery.mystery',
      ]) {
        expect(transition(ended, late).stale, late).toBe(true);
      }
    }
    expect(transition(returned, 'delivery.dropoff_complete').contradicts).toBe(true);
    expect(transition(returned, 'delivery.pickup_complete').contradicts).toBe(false);
    for (const other of ['delivery.failed', 'delivery.canceled', 'delivery.return_in_progress', 'delivery.returned'])
      expect(transition(delivered, other).contradicts, other).toBe(true);
    for (const late of [...PATH, 'location.return_in_progress'])
      expect(transition(delivered, late).contradicts, late).toBe(false);
  });
});

describe('when a read decides', () => {
  it('a read newer than the state settles a contradiction: a failure then a completed second attempt ends DROPOFF_COMPLETE', () => {
    const { stale, contradicts, state } = run([
      ...PATH.slice(0, 7),
      'delivery.failed',
      'delivery.dropoff_enroute',
      'delivery.dropoff_arrived',
      'delivery.dropoff_complete',
      read('delivery.dropoff_complete'),
      'delivery.dropoff_complete',
    ]);
    expect(stale.slice(7)).toEqual([false, true, true, true, false, true]);
    expect(contradicts.slice(7)).toEqual([false, true, true, true, false, false]);
    expect(state).toEqual({ rank: 7, terminal: true, pickedUp: true, seq: 12 });
  });

  it('a read wins over a final state it contradicts, and where one end contradicts another', () => {
    // Delivered, then read as failed (a failure after dropoff_complete): the read stands, and the return follows.
    expect(
      shape(
        stateAfterNames('delivery.dropoff_complete', 'delivery.failed', read('delivery.failed'), 'delivery.returned'),
      ),
    ).toEqual({ rank: 10, terminal: true, pickedUp: true });
    // Returned, or canceled and confirmed, then read delivered.
    expect(
      shape(
        stateAfterNames(
          'delivery.pickup_complete',
          'delivery.failed',
          'delivery.returned',
          read('delivery.dropoff_complete'),
        ),
      ),
    ).toEqual({ rank: 7, terminal: true, pickedUp: true });
    expect(
      shape(stateAfterNames('delivery.canceled', read('delivery.canceled', true), read('delivery.dropoff_complete'))),
    ).toEqual({ rank: 7, terminal: true, pickedUp: true });
    // Failed, then read on the way to the recipient: a second attempt, or a read made late; only its end decides.
    const failed = stateAfterNames('delivery.pickup_complete', 'delivery.failed');
    for (const way of [
      'delivery.created',
      'delivery.pickup_complete',
      'delivery.dropoff_enroute',
      'delivery.dropoff_arrived',
    ]) {
      expect(transition(failed, way, undefined, { basis: 99, confirm: false }).stale, way).toBe(true);
    }
    // Back within the not-delivered branch neither.
    expect(
      transition(
        stateAfterNames('delivery.pickup_complete', 'delivery.failed', 'delivery.returned'),
        'delivery.return_in_progress',
        undefined,
        { basis: 99, confirm: false },
      ).stale,
    ).toBe(true);
  });

  it('along the delivery path a read never goes back, and a read older than the state is judged as any event', () => {
    const arrived = stateAfterNames('delivery.dropoff_arrived');
    expect(transition(arrived, 'delivery.pickup_complete', undefined, { basis: 5, confirm: false }).stale).toBe(true);
    // Made before the failure was stored (basis 1 < seq 2): the failure stands.
    const { stale, state } = run([
      'delivery.pickup_complete',
      'delivery.failed',
      ['delivery.dropoff_complete', { basis: 1, confirm: false }],
    ]);
    expect(stale).toEqual([false, false, true]);
    expect(shape(state)).toEqual({ rank: 8, terminal: false, pickedUp: true });
  });

  it('a cancel or failure with no evidence of pickup becomes final only with a confirming read', () => {
    for (const end of ['delivery.canceled', 'delivery.failed']) {
      const open = stateAfterNames('delivery.assigned', end);
      expect(transition(open, end, undefined, { basis: 9, confirm: false }).stale).toBe(true);
      const confirmed = transition(open, end, undefined, { basis: 9, confirm: true });
      expect(confirmed).toMatchObject({ stale: false, moved: true, state: { rank: 8, terminal: true } });
      // Final: a late return then contradicts it, and the next read settles it.
      expect(transition(confirmed.state, 'delivery.return_in_progress')).toMatchObject({
        stale: true,
        contradicts: false,
      });
      expect(transition(confirmed.state, 'delivery.dropoff_arrived')).toMatchObject({ stale: true, contradicts: true });
      expect(transition(confirmed.state, 'delivery.returned', undefined, { basis: 9, confirm: false })).toMatchObject({
        stale: false,
        moved: true,
        state: { rank: 10, terminal: true, pickedUp: true },
      });
    }
  });

  it('polling alone: reads of Created, Canceled and Returned end at RETURNED, not at a cancel before pickup', () => {
    const { stale, state } = run([
      read('delivery.created'),
      read('delivery.canceled'),
      read('delivery.return_in_progress'),
      read('delivery.returned'),
    ]);
    expect(stale).toEqual([false, false, false, false]);
    expect(shape(state)).toEqual({ rank: 10, terminal: true, pickedUp: true });
    expect(shape(stateAfterNames(read('delivery.created'), read('delivery.canceled')))).toEqual({
      rank: 8,
      terminal: false,
    });
  });
});

describe('duplicates and positions', () => {
  it('a delivery.* event repeating the current milestone is stale; a position repeating it is not', () => {
    for (const name of [...PATH.slice(0, -1), 'delivery.return_in_progress']) {
      const state =
        name === 'delivery.return_in_progress'
          ? stateAfterNames('delivery.pickup_complete', name)
          : stateAfterNames(name);
      expect(transition(state, name).stale, name).toBe(true);
    }
    const enroute = stateAfterNames('delivery.dropoff_enroute');
    expect(transition(enroute, 'location.dropoff_enroute')).toEqual({
      stale: false,
      courierOnly: false,
      moved: false,
      contradicts: false,
      state: enroute,
    });
    expect(transition(enroute, 'Location.Dropoff_Enroute').stale).toBe(false);
  });

  it('positions never move the state, one from an earlier milestone is stale, and one past pickup proves it', () => {
    const arrived = stateAfterNames('delivery.pickup_arrived');
    expect(transition(arrived, 'location.dropoff_enroute')).toEqual({
      stale: false,
      courierOnly: false,
      moved: false,
      contradicts: false,
      state: { ...arrived, pickedUp: true },
    });
    expect(transition(arrived, 'location.pickup_enroute')).toEqual({
      stale: true,
      courierOnly: false,
      moved: false,
      contradicts: false,
      state: arrived,
    });
    expect(transition(arrived, 'location.assigned_driver').stale).toBe(true);
    expect(transition(undefined, 'location.pickup_enroute')).toEqual({
      stale: false,
      courierOnly: false,
      moved: false,
      contradicts: false,
      state: undefined,
    });
  });

  it('location.return_in_progress is fine during a return and after a failure past pickup', () => {
    const failed = stateAfterNames('delivery.pickup_complete', 'delivery.failed');
    expect(transition(failed, 'location.return_in_progress')).toEqual({
      stale: false,
      courierOnly: false,
      moved: false,
      contradicts: false,
      state: failed,
    });
    const returning = stateAfterNames('delivery.pickup_complete', 'delivery.failed', 'delivery.return_in_progress');
    expect(transition(returning, 'location.return_in_progress')).toEqual({
      stale: false,
      courierOnly: false,
      moved: false,
      contradicts: false,
      state: returning,
    });
    expect(transition(returning, 'location.dropoff_arrived').stale).toBe(true);
  });

  it('an unknown milestone is never ranked and moves nothing, but is stale after a final state', () => {
    const enroute = stateAfterNames('delivery.pickup_enroute');
    expect(transition(enroute, 'delivery.teleported')).toEqual({
      stale: false,
      courierOnly: false,
      moved: false,
      contradicts: false,
      state: enroute,
    });
    expect(transition(undefined, 'delivery.teleported')).toEqual({
      stale: false,
      courierOnly: false,
      moved: false,
      contradicts: false,
      state: undefined,
    });
    expect(transition(enroute, 'ping')).toEqual({
      stale: false,
      courierOnly: false,
      moved: false,
      contradicts: false,
      state: enroute,
    });
    expect(transition(stateAfterNames('delivery.dropoff_complete'), 'ping').stale).toBe(true);
  });

  it('reads event names in any case', () => {
    expect(
      run(['Delivery.Pickup_Complete', 'DELIVERY.FAILED', 'delivery.RETURN_IN_PROGRESS', 'delivery.assigned']).stale,
    ).toEqual([false, false, false, true]);
    expect(shape(stateAfterNames('DELIVERY.PICKUP_COMPLETE', 'Delivery.Failed'))).toEqual({
      rank: 8,
      terminal: false,
      pickedUp: true,
    });
  });
});

describe('what the Redis script is told, snapshots, and the fold', () => {
  it('gives each event its rank, whether it moves the state, when it is final, whether it proves a pickup and is a dropoff', () => {
    const facts = (
      rank: number | undefined,
      moves: boolean,
      final: string,
      provesPickup: boolean,
      dropoff: boolean,
    ) => ({ rank, moves, final, provesPickup, dropoff });
    expect(eventFacts('delivery.pickup_arrived')).toEqual(facts(3, true, 'never', false, false));
    expect(eventFacts('delivery.pickup_complete')).toEqual(facts(4, true, 'never', true, false));
    expect(eventFacts('delivery.dropoff_complete')).toEqual(facts(7, true, 'always', true, true));
    expect(eventFacts('delivery.failed')).toEqual(facts(8, true, 'when_confirmed', false, false));
    expect(eventFacts('delivery.canceled')).toEqual(facts(8, true, 'when_confirmed', false, false));
    expect(eventFacts('delivery.return_in_progress')).toEqual(facts(9, true, 'never', true, false));
    expect(eventFacts('delivery.returned')).toEqual(facts(10, true, 'always', true, false));
    expect(eventFacts('location.assigned_driver')).toEqual(facts(1, false, 'never', false, false));
    expect(eventFacts('location.dropoff_arrived')).toEqual(facts(6, false, 'never', true, true));
    expect(eventFacts('delivery.mystery')).toEqual(facts(undefined, true, 'never', false, false));
  });

  it('takes a status read from the upstream as a state; a read cancel or failure is not final', () => {
    expect(stateOfStatus('PICKUP_COMPLETE')).toEqual({ rank: 4, terminal: false, pickedUp: true });
    expect(stateOfStatus('RETURN_IN_PROGRESS')).toEqual({ rank: 9, terminal: false, pickedUp: true });
    expect(stateOfStatus('FAILED')).toEqual({ rank: 8, terminal: false });
    expect(stateOfStatus('CANCELED')).toEqual({ rank: 8, terminal: false });
    expect(stateOfStatus('RETURNED')).toEqual({ rank: 10, terminal: true, pickedUp: true });
    expect(stateOfStatus('UNKNOWN')).toBeUndefined();
  });

  it('stateAfter folds facts as the stores do, one seq each', () => {
    const names = [
      'delivery.assigned',
      'delivery.canceled',
      'delivery.pickup_complete',
      'delivery.return_in_progress',
      'delivery.returned',
    ];
    expect(stateAfter(names.map((name) => eventFacts(name)))).toEqual(run(names).state);
    expect(stateAfter([])).toBeUndefined();
  });
});

describe('the status an event gives its delivery', () => {
  it('comes from event_name, whatever the human-readable label says', () => {
    const collected = fromWebhookEvent({
      uid: 'u',
      event_name: 'delivery.pickup_complete',
      status: 'Package collected',
    });
    expect(collected.status).toBe('PICKUP_COMPLETE');
    expect(collected.rawStatus).toBe('Package collected');
    // A label naming another milestone does not win over the name either.
    expect(fromWebhookEvent({ uid: 'u', event_name: 'delivery.return_in_progress', status: 'Failed' }).status).toBe(
      'RETURN_IN_PROGRESS',
    );
    expect(fromWebhookEvent({ uid: 'u', event_name: 'location.assigned_driver', status: null }).status).toBe(
      'ASSIGNED',
    );
    expect(statusOfWebhook('delivery.returned', 'Back at the shop')).toBe('RETURNED');
  });

  it('falls back to the label only for an event name the facade does not know', () => {
    expect(fromWebhookEvent({ uid: 'u', event_name: 'delivery.teleported', status: 'Picked Up' }).status).toBe(
      'PICKUP_COMPLETE',
    );
    expect(fromWebhookEvent({ uid: 'u', event_name: 'delivery.teleported', status: 'Beamed' }).status).toBe('UNKNOWN');
    expect(statusOfWebhook(undefined, 'Delivered')).toBe('DROPOFF_COMPLETE');
  });
});

describe('couriers', () => {
  const ana = { id: '1', name: 'Ana Costa' };
  const ben = { id: '2', name: 'Ben Okafor' };
  const enroute = transition(
    transition(undefined, 'delivery.assigned', ana).state,
    'delivery.pickup_enroute',
    ana,
  ).state;

  it('a delivery.* event naming another courier changes the courier alone when its milestone is late or a repeat', () => {
    expect(transition(enroute, 'delivery.assigned', ben)).toEqual({
      stale: false,
      courierOnly: true,
      moved: false,
      contradicts: false,
      state: { rank: 2, terminal: false, courier: ben, formerCouriers: [ana] },
    });
    expect(transition(enroute, 'delivery.pickup_enroute', ben).courierOnly).toBe(true);
    // The same courier on a late milestone is stale as before.
    expect(transition(enroute, 'delivery.assigned', ana)).toEqual({
      stale: true,
      courierOnly: false,
      moved: false,
      contradicts: false,
      state: enroute,
    });
  });

  it('after a change, the replaced courier is stale, positions of a courier not announced are stale, and a final state ends it all', () => {
    const changed = transition(enroute, 'delivery.assigned', ben).state;
    for (const name of ['location.pickup_enroute', 'delivery.pickup_enroute', 'delivery.pickup_arrived'])
      expect(transition(changed, name, ana).stale, name).toBe(true);
    expect(transition(changed, 'location.pickup_enroute', ben).stale).toBe(false);
    expect(transition(enroute, 'location.pickup_enroute', ben).stale).toBe(true);
    expect(transition(stateAfterNames('delivery.dropoff_complete'), 'delivery.assigned', ben).stale).toBe(true);
  });

  it('compares by driver_id when both events carry one, else by name', () => {
    expect(transition(enroute, 'delivery.assigned', { id: '1', name: 'A. Costa' }).stale).toBe(true);
    expect(transition(enroute, 'delivery.assigned', { id: null, name: 'Ana Costa' }).stale).toBe(true);
    expect(transition(enroute, 'delivery.assigned', { id: null, name: 'Ben Okafor' }).courierOnly).toBe(true);
    expect(courierIdentity({ driver_id: 7, driver_name: '' })).toEqual({ id: '7', name: null });
    expect(courierIdentity({ driver_id: null, driver_name: null })).toBeUndefined();
  });
});

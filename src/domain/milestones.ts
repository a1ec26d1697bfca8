// The delivery lifecycle as the facade judges it: milestone ranks, the return
// path and what is final. Webhooks arrive late, twice and out of order, so every
// event is judged against the delivery's current state before it may change it.
// One rule in one place: the SQLite store calls transition(), the Redis append
// script receives eventFacts() and mirrors judge() line for line (a test runs
// every case through both), and the subscription streams call transition() too.
import type { DeliveryStatus } from '../mapping/model.js';
import { statusOfEvent } from './status.js';

/**
 * When a milestone ends the delivery: always, never, or only when the package
 * had not been picked up yet (a cancel or failure after pickup is followed by
 * the return path: return_in_progress, then returned).
 */
export type Finality = 'always' | 'never' | 'before_pickup';

interface Milestone {
  rank: number;
  final: Finality;
}

/**
 * created < assigned < pickup_enroute < pickup_arrived < pickup_complete <
 * dropoff_enroute < dropoff_arrived < dropoff_complete. Canceled and failed rank
 * above every dropoff milestone (a later dropoff event is late), and the return
 * above them, in its own order. Integers, so the Redis script compares exactly.
 */
const MILESTONES: Readonly<Partial<Record<DeliveryStatus, Milestone>>> = Object.freeze({
  CREATED: { rank: 0, final: 'never' },
  ASSIGNED: { rank: 1, final: 'never' },
  PICKUP_ENROUTE: { rank: 2, final: 'never' },
  PICKUP_ARRIVED: { rank: 3, final: 'never' },
  PICKUP_COMPLETE: { rank: 4, final: 'never' },
  DROPOFF_ENROUTE: { rank: 5, final: 'never' },
  DROPOFF_ARRIVED: { rank: 6, final: 'never' },
  DROPOFF_COMPLETE: { rank: 7, final: 'always' },
  CANCELED: { rank: 8, final: 'before_pickup' },
  FAILED: { rank: 8, final: 'before_pickup' },
  RETURN_IN_PROGRESS: { rank: 9, final: 'never' },
  RETURNED: { rank: 10, final: 'always' },
});

/** A state at or above this rank had the package in the vehicle. */
export const PICKED_UP_RANK = MILESTONES.PICKUP_COMPLETE!.rank;

/**
 * Who a courier is, as an event names them: driver_id where the upstream gives
 * one (webhooks carry a number; reads keep it reserved and null), else driver_name.
 */
export interface CourierIdentity {
  id: string | null;
  name: string | null;
}

/** The courier a webhook body (or read) names; undefined when it names none. */
export function courierIdentity(payload: { driver_id?: unknown; driver_name?: unknown }): CourierIdentity | undefined {
  const rawId = payload.driver_id;
  const id = typeof rawId === 'number' && Number.isFinite(rawId) ? String(rawId) : typeof rawId === 'string' && rawId !== '' ? rawId : null;
  const name = typeof payload.driver_name === 'string' && payload.driver_name !== '' ? payload.driver_name : null;
  return id === null && name === null ? undefined : { id, name };
}

/** The same courier: by driver_id when both name one, else by driver_name. */
export function sameCourier(a: CourierIdentity, b: CourierIdentity): boolean {
  return a.id !== null && b.id !== null ? a.id === b.id : a.name === b.name;
}

/** Where a delivery stands, as both stores keep it (SQLite's delivery_state row, Redis's delivery hash). */
export interface MilestoneState {
  rank: number;
  /** Final: every later event is stale. */
  terminal: boolean;
  /** The courier the accepted `delivery.*` events named last; absent before any named one. */
  courier?: CourierIdentity;
  /** Couriers replaced by another one, oldest first: their later events are stale. Absent when none. */
  formerCouriers?: CourierIdentity[];
}

export interface Transition {
  /** Arrived too late to count: stored, marked, and changes nothing. */
  stale: boolean;
  /**
   * Changed the courier and nothing else: a `delivery.*` event naming another
   * courier (a reassignment) whose milestone is behind the current one or repeats it.
   */
  courierOnly: boolean;
  /** The state after the event: the current one when stale or when the event does not move it. */
  state: MilestoneState | undefined;
}

/** Event kinds ignore ASCII case, as the stores' queries do (SQLite's LIKE, Redis's lower-cased flag). */
export function isDeliveryEvent(eventName: string): boolean {
  return /^delivery\./i.test(eventName);
}

export function isLocationEvent(eventName: string): boolean {
  return /^location\./i.test(eventName);
}

/** Rank of an event's milestone (`delivery.*` or `location.*`); undefined for names the facade does not know. */
export function milestoneRank(eventName: string): number | undefined {
  return MILESTONES[statusOfEvent(eventName)]?.rank;
}

/** What judge() needs to know about an event, and all the Redis append script is told about it. */
export interface EventFacts {
  /** Rank of its milestone; undefined for a milestone the facade does not know (never ranked, never moves). */
  rank: number | undefined;
  /** `delivery.*` events move the state; every other event (`location.*`) is only judged against it. */
  moves: boolean;
  final: Finality;
  /** The courier the event names (driver_id, driver_name); undefined when none. */
  courier?: CourierIdentity;
}

export function eventFacts(eventName: string, courier?: CourierIdentity): EventFacts {
  const milestone = MILESTONES[statusOfEvent(eventName)];
  return { rank: milestone?.rank, moves: isDeliveryEvent(eventName), final: milestone?.final ?? 'never', courier };
}

/**
 * The rule, and the one place that decides whether an event changes what a
 * subscriber sees. An event is stale after a final state, or below the current
 * rank, or (a `delivery.*` event) at it: a repeat of the current milestone. A
 * position may repeat its milestone (a courier en route moves). A `delivery.*`
 * event of a known milestone that is not stale becomes the state; it is final
 * when its milestone always is, or when it is a cancel or failure before pickup.
 * Couriers get reassigned, so the courier an event names is judged too: an event
 * of a courier already replaced is stale; a position of a courier other than the
 * current one is stale (a courier counts once a `delivery.*` event named them);
 * a `delivery.*` event naming another courier changes the courier even when its
 * milestone is late or a repeat (courierOnly: the rank stays where it was).
 * Mirrored by the APPEND script in src/store/redis.ts: change both together.
 */
export function judge(current: MilestoneState | undefined, facts: EventFacts): Transition {
  const stale = { stale: true, courierOnly: false, state: current };
  if (current?.terminal) return stale;
  if (facts.rank === undefined) return { stale: false, courierOnly: false, state: current };
  const courier = facts.courier;
  if (courier && current?.formerCouriers?.some((former) => sameCourier(former, courier))) return stale;
  const other = courier !== undefined && current?.courier !== undefined && !sameCourier(current.courier, courier);
  if (other && !facts.moves) return stale;
  if (current && (facts.rank < current.rank || (facts.moves && facts.rank === current.rank))) {
    if (!other) return stale;
    return { stale: false, courierOnly: true, state: { ...current, ...withCourier(current, courier) } };
  }
  if (!facts.moves) return { stale: false, courierOnly: false, state: current };
  const pickedUp = current !== undefined && current.rank >= PICKED_UP_RANK;
  const terminal = facts.final === 'always' || (facts.final === 'before_pickup' && !pickedUp);
  return { stale: false, courierOnly: false, state: { rank: facts.rank, terminal, ...withCourier(current, courier) } };
}

/** The courier part of a state after an accepted `delivery.*` event: the courier it names (or the current one), the replaced one remembered. */
function withCourier(current: MilestoneState | undefined, courier: CourierIdentity | undefined): Pick<MilestoneState, 'courier' | 'formerCouriers'> {
  const part: Pick<MilestoneState, 'courier' | 'formerCouriers'> = {};
  const next = courier ?? current?.courier;
  if (next) part.courier = next;
  const formers = [...(current?.formerCouriers ?? [])];
  if (courier && current?.courier && !sameCourier(current.courier, courier)) formers.push(current.courier);
  if (formers.length > 0) part.formerCouriers = formers;
  return part;
}

/** The current state and an event (its name, and the courier it names) → stale or not, and the next state. */
export function transition(current: MilestoneState | undefined, eventName: string, courier?: CourierIdentity): Transition {
  return judge(current, eventFacts(eventName, courier));
}

/**
 * The state a status read from the upstream stands for (a subscription's
 * `snapshot`). A read does not say whether a canceled or failed package was
 * picked up; with no webhook stored for the delivery none is expected either,
 * so such a read counts as final. Undefined for UNKNOWN. The read's courier, when
 * it names one, is the courier later events are judged against.
 */
export function stateOfStatus(status: DeliveryStatus, courier?: CourierIdentity): MilestoneState | undefined {
  const milestone = MILESTONES[status];
  return milestone && { rank: milestone.rank, terminal: milestone.final !== 'never', ...(courier ? { courier } : {}) };
}

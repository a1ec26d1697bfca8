// The delivery lifecycle as the facade judges it: milestone ranks, evidence of
// pickup, what is final, and when a read of the upstream decides. The upstream's
// document says events repeat and arrive out of order, and a webhook is retried
// at most five times, so the state is judged on all the evidence so far and
// revised when later evidence comes: "final" is a decision taken with a reason
// (a final milestone, or a read confirming a cancel or failure), not a rank reached.
// One rule in one place, applied once per event, where it is stored: the SQLite
// store calls judge() (src/store/sqlite-append.ts), the Redis append script
// receives factsOf() and mirrors judge() line for line (a test runs every case
// through both), and the verdict is stored with the event (StoredEvent's
// stale, courierOnly, contradicts, moved, final), which the subscription
// streams and reconciliation follow. A pure function over facts: stateAfter()
// folds a sequence of them.
import { statusOfEvent, type DeliveryStatus } from './status.js';

/**
 * When a milestone ends the delivery: always (DROPOFF_COMPLETE, RETURNED), never,
 * or once confirmed (CANCELED, FAILED): only a read of the upstream made after
 * FINALITY_GRACE_MS that still says so, with no evidence of pickup, ends it;
 * until then a return or a second attempt may follow.
 */
export type Finality = 'always' | 'never' | 'when_confirmed';

interface Milestone {
  rank: number;
  final: Finality;
  /** Only a package that was picked up reaches it: evidence of pickup, whenever it arrives. */
  provesPickup: boolean;
  /** A dropoff milestone: after a cancel, failure or return it contradicts where the delivery stands. */
  dropoff: boolean;
}

const milestone = (rank: number, final: Finality, provesPickup = false, dropoff = false): Milestone => ({
  rank,
  final,
  provesPickup,
  dropoff,
});

/**
 * created < assigned < pickup_enroute < pickup_arrived < pickup_complete <
 * dropoff_enroute < dropoff_arrived < dropoff_complete. Canceled and failed rank
 * above every dropoff milestone (the delivered branch ends at 7, the not-delivered
 * one starts at 8), and the return above them, in its own order. Integers, so the
 * Redis script compares exactly.
 */
const MILESTONES: Readonly<Partial<Record<DeliveryStatus, Milestone>>> = Object.freeze({
  CREATED: milestone(0, 'never'),
  ASSIGNED: milestone(1, 'never'),
  PICKUP_ENROUTE: milestone(2, 'never'),
  PICKUP_ARRIVED: milestone(3, 'never'),
  PICKUP_COMPLETE: milestone(4, 'never', true),
  DROPOFF_ENROUTE: milestone(5, 'never', true, true),
  DROPOFF_ARRIVED: milestone(6, 'never', true, true),
  DROPOFF_COMPLETE: milestone(7, 'always', true, true),
  CANCELED: milestone(8, 'when_confirmed'),
  FAILED: milestone(8, 'when_confirmed'),
  RETURN_IN_PROGRESS: milestone(9, 'never', true),
  RETURNED: milestone(10, 'always', true),
});

/** The delivered branch's end: DROPOFF_COMPLETE. */
export const DELIVERED_RANK = MILESTONES.DROPOFF_COMPLETE!.rank;
/** From here up, the not-delivered branch: CANCELED or FAILED, then the return. */
export const NOT_DELIVERED_RANK = MILESTONES.CANCELED!.rank;

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
  const id =
    typeof rawId === 'number' && Number.isFinite(rawId)
      ? String(rawId)
      : typeof rawId === 'string' && rawId !== ''
        ? rawId
        : null;
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
  /** Final: nothing more moves it; a later event that contradicts it asks the upstream (see Transition.contradicts). */
  terminal: boolean;
  /** Some event (or read) proved the package was picked up. Absent when none did. */
  pickedUp?: true;
  /**
   * The log position of the event that last moved the milestone (or decided it final); absent on a state not from the
   * log.
   */
  seq?: number;
  /** The courier the accepted `delivery.*` events named last; absent before any named one. */
  courier?: CourierIdentity;
  /** Couriers replaced by another one, oldest first: their later events are stale. Absent when none. */
  formerCouriers?: CourierIdentity[];
}

export interface Transition {
  /** Arrived too late to move the status: stored, marked, and moves nothing (it may still prove a pickup). */
  stale: boolean;
  /**
   * Changed the courier and not the status: a `delivery.*` event naming another
   * courier (a reassignment) whose milestone is behind the current one or repeats it.
   */
  courierOnly: boolean;
  /** The event is now the state's last mover: it moved the milestone, or (a confirming read) made it final. */
  moved: boolean;
  /**
   * It contradicts where the delivery stands (a dropoff after a cancel, failure
   * or return; a cancel, failure or return after DROPOFF_COMPLETE): it moves
   * nothing itself, and one read of the upstream settles it (the read wins).
   */
  contradicts: boolean;
  /** The state after the event: the current one when it changes nothing. */
  state: MilestoneState | undefined;
}

/** Event kinds ignore ASCII case, as the stores' queries do (SQLite's LIKE, Redis's lower-cased flag). */
export function isDeliveryEvent(eventName: string): boolean {
  return /^delivery\./i.test(eventName);
}

export function isLocationEvent(eventName: string): boolean {
  return /^location\./i.test(eventName);
}

/** Each event name's milestone: names are few, and every event (and every subscriber's stream) asks. */
const milestonesByName = new Map<string, Milestone | undefined>();
/** Names kept at most (the documented ones are two dozen; any signed name is read, the rest are not kept). */
const MAX_NAMES = 256;

function milestoneOf(eventName: string): Milestone | undefined {
  const known = milestonesByName.get(eventName);
  if (known !== undefined || milestonesByName.has(eventName)) return known;
  const milestone = MILESTONES[statusOfEvent(eventName)];
  if (milestonesByName.size < MAX_NAMES) milestonesByName.set(eventName, milestone);
  return milestone;
}

/** Rank of an event's milestone (`delivery.*` or `location.*`); undefined for names the facade does not know. */
export function milestoneRank(eventName: string): number | undefined {
  return milestoneOf(eventName)?.rank;
}

/** Rank of a status; undefined for UNKNOWN. */
export function statusRank(status: DeliveryStatus): number | undefined {
  return MILESTONES[status]?.rank;
}

/** A poll event: made by the facade from a read of the upstream, not received. */
export interface ReadFacts {
  /** The log's last seq when the read was made: a state moved after it is newer than the read. */
  basis: number;
  /** The read confirms a cancel or failure as final (FINALITY_GRACE_MS passed since it was first seen). */
  confirm: boolean;
}

/** What judge() needs to know about an event, and all the Redis append script is told about it. */
export interface EventFacts {
  /** Rank of its milestone; undefined for a milestone the facade does not know (never ranked, never moves). */
  rank: number | undefined;
  /** `delivery.*` events move the state; every other event (`location.*`) is only judged against it. */
  moves: boolean;
  final: Finality;
  /** Its milestone proves the package was picked up (a position of that milestone too). */
  provesPickup: boolean;
  /** A dropoff milestone (see Milestone.dropoff). */
  dropoff: boolean;
  /** The courier the event names (driver_id, driver_name); undefined when none. */
  courier?: CourierIdentity;
  /** Set on a poll event: the read it was made from. */
  read?: ReadFacts;
}

/** What a poll event's payload says of the read it was made from (see src/realtime/reconcile.ts). */
export interface ReadMarkers {
  facade_source?: unknown;
  facade_read_basis?: unknown;
  facade_confirms?: unknown;
}

/** The payload marker of an event made from a read. */
export const POLL_SOURCE = 'poll';

/**
 * The read behind a poll event; undefined for a received webhook (or a poll event stored before reads carried their
 * basis).
 */
export function readFactsOf(payload: ReadMarkers): ReadFacts | undefined {
  if (payload.facade_source !== POLL_SOURCE || typeof payload.facade_read_basis !== 'number') return undefined;
  return { basis: payload.facade_read_basis, confirm: payload.facade_confirms === true };
}

export function eventFacts(eventName: string, courier?: CourierIdentity, read?: ReadFacts): EventFacts {
  const milestone = milestoneOf(eventName);
  const facts: EventFacts = {
    rank: milestone?.rank,
    moves: isDeliveryEvent(eventName),
    final: milestone?.final ?? 'never',
    provesPickup: milestone?.provesPickup ?? false,
    dropoff: milestone?.dropoff ?? false,
  };
  if (courier) facts.courier = courier;
  if (read) facts.read = read;
  return facts;
}

/**
 * The facts of a stored or received event, from its payload alone: its name, the courier it names, the read it was made
 * from.
 */
export function factsOf(
  payload: { event_name: string; driver_id?: unknown; driver_name?: unknown } & ReadMarkers,
): EventFacts {
  return eventFacts(payload.event_name, courierIdentity(payload), readFactsOf(payload));
}

/** Whether an event of these facts contradicts a delivery at this rank (see Transition.contradicts). */
function contradictsRank(rank: number, facts: EventFacts): boolean {
  if (!facts.moves || facts.rank === undefined) return false;
  return (rank >= NOT_DELIVERED_RANK && facts.dropoff) || (rank === DELIVERED_RANK && facts.rank >= NOT_DELIVERED_RANK);
}

/**
 * The rule, and the one place that decides what an event changes.
 * - An unknown milestone moves nothing (stale after a final state).
 * - A poll event whose read is newer than the state (no event moved it since the
 *   read was made) decides: the read wins wherever it goes forward, and where one
 *   end contradicts another (a cancel, failure or return read as DROPOFF_COMPLETE:
 *   a second attempt); it confirms a cancel or failure with no evidence of pickup
 *   as final. Otherwise it never goes back: a read still showing the way to the
 *   recipient after a failure may be one made late, and only the end says which.
 * - Otherwise an event is stale after a final state, below the current rank, or (a
 *   `delivery.*` event) at it: a repeat. Stale or not, a milestone that proves a
 *   pickup marks the state picked up, and one that contradicts an end is flagged
 *   for a read. A position may repeat its milestone (a courier en route moves).
 * - A `delivery.*` event of a known milestone that is not stale becomes the state;
 *   it is final when its milestone always is (a cancel or failure never is on arrival).
 * - Couriers get reassigned: an event of a courier already replaced is stale; a
 *   position of a courier other than the current one is stale (a courier counts
 *   once a `delivery.*` event named them); a `delivery.*` event naming another
 *   courier changes the courier even when its milestone is late or a repeat
 *   (courierOnly: the rank stays where it was).
 * A state that moved keeps no seq here: the caller writes the event's.
 * Mirrored by the APPEND script in src/store/redis.ts: change both together.
 */
export function judge(current: MilestoneState | undefined, facts: EventFacts): Transition {
  const evidence = current !== undefined && facts.provesPickup && !current.pickedUp;
  const kept: MilestoneState | undefined = evidence ? { ...current, pickedUp: true } : current;
  const same = (stale: boolean, contradicts = false): Transition => ({
    stale,
    courierOnly: false,
    moved: false,
    contradicts,
    state: kept,
  });
  if (facts.rank === undefined) return same(current?.terminal === true);
  if (facts.read && facts.moves && current && (current.seq ?? 0) <= facts.read.basis)
    return judgeRead(current, kept!, facts, same);
  const contradicts = current !== undefined && contradictsRank(current.rank, facts);
  if (current?.terminal) return same(true, contradicts);
  const courier = facts.courier;
  if (courier && current?.formerCouriers?.some((former) => sameCourier(former, courier)))
    return same(true, contradicts);
  const other = courier !== undefined && current?.courier !== undefined && !sameCourier(current.courier, courier);
  if (other && !facts.moves) return same(true);
  if (current && (facts.rank < current.rank || (facts.moves && facts.rank === current.rank))) {
    if (!other) return same(true, contradicts);
    return {
      stale: false,
      courierOnly: true,
      moved: false,
      contradicts,
      state: { ...kept!, ...withCourier(current, courier) },
    };
  }
  if (!facts.moves) return same(false);
  return moveTo(current, facts);
}

/** A read newer than the state: what it says stands, within the limits judge() describes. */
function judgeRead(
  current: MilestoneState,
  kept: MilestoneState,
  facts: EventFacts,
  same: (stale: boolean) => Transition,
): Transition {
  const rank = facts.rank!;
  if (rank === current.rank) {
    // The same end read again after the grace, and nothing proved a pickup: nothing else will come.
    const settles = facts.read!.confirm && facts.final === 'when_confirmed' && !current.terminal && !kept.pickedUp;
    return settles
      ? { stale: false, courierOnly: false, moved: true, contradicts: false, state: { ...kept, terminal: true } }
      : same(true);
  }
  const wins = rank > current.rank || (current.rank >= NOT_DELIVERED_RANK && rank === DELIVERED_RANK);
  return wins ? moveTo(kept, facts) : same(true);
}

/** The state a moving event (or winning read) makes. */
function moveTo(current: MilestoneState | undefined, facts: EventFacts): Transition {
  const pickedUp = current?.pickedUp === true || facts.provesPickup;
  const state: MilestoneState = {
    rank: facts.rank!,
    terminal: facts.final === 'always',
    ...(pickedUp ? { pickedUp: true as const } : {}),
    ...withCourier(current, facts.courier),
  };
  return { stale: false, courierOnly: false, moved: true, contradicts: false, state };
}

/**
 * The courier part of a state after an accepted `delivery.*` event: the courier it names (or the current one), the
 * replaced one remembered.
 */
function withCourier(
  current: MilestoneState | undefined,
  courier: CourierIdentity | undefined,
): Pick<MilestoneState, 'courier' | 'formerCouriers'> {
  const part: Pick<MilestoneState, 'courier' | 'formerCouriers'> = {};
  const next = courier ?? current?.courier;
  if (next) part.courier = next;
  const formers = [...(current?.formerCouriers ?? [])];
  if (courier && current?.courier && !sameCourier(current.courier, courier)) formers.push(current.courier);
  if (formers.length > 0) part.formerCouriers = formers;
  return part;
}

/** The current state and an event (its name, the courier it names, the read it was made from) → what it changes. */
export function transition(
  current: MilestoneState | undefined,
  eventName: string,
  courier?: CourierIdentity,
  read?: ReadFacts,
): Transition {
  return judge(current, eventFacts(eventName, courier, read));
}

/**
 * One step of a fold, as the stores take it: the next state, with the event's
 * seq where it became the last mover.
 */
export function advance(current: MilestoneState | undefined, facts: EventFacts, seq: number): Transition {
  const step = judge(current, facts);
  return step.moved ? { ...step, state: { ...step.state!, seq } } : step;
}

/** The state after a sequence of facts, each stored in turn (seq 1, 2, …): the whole rule as one pure function. */
export function stateAfter(facts: readonly EventFacts[], start?: MilestoneState): MilestoneState | undefined {
  let state = start;
  facts.forEach((fact, index) => {
    state = advance(state, fact, index + 1).state;
  });
  return state;
}

/**
 * A cancel or failure with no evidence of pickup, not yet confirmed: the
 * delivery may still come back (a return) or be delivered (a second attempt),
 * so a read after FINALITY_GRACE_MS is what may end it.
 */
export function awaitsConfirmation(state: MilestoneState | undefined): boolean {
  return state !== undefined && !state.terminal && !state.pickedUp && state.rank === NOT_DELIVERED_RANK;
}

/**
 * The state a status read from the upstream stands for (a subscription's
 * `snapshot`, with no event stored). A read does not say whether a canceled or
 * failed package was picked up, so such a read is not final: later reads (or
 * events) decide, as for a cancel or failure received. Undefined for UNKNOWN.
 * The read's courier, when it names one, is the courier later events are judged against.
 */
export function stateOfStatus(status: DeliveryStatus, courier?: CourierIdentity): MilestoneState | undefined {
  const milestone = MILESTONES[status];
  if (!milestone) return undefined;
  return {
    rank: milestone.rank,
    terminal: milestone.final === 'always',
    ...(milestone.provesPickup ? { pickedUp: true as const } : {}),
    ...(courier ? { courier } : {}),
  };
}

// The three subscription streams. Each attaches its listener before it reads
// the store, so nothing published in between is missed, and then skips what it
// already yielded by seq: no gap, no repeat. What an event did to its delivery
// (stale, moved, changed the courier, made it final) was judged once, by the
// store as it stored it (StoredEvent); the streams follow that verdict.
import { BadUserInputError, ForbiddenError, NotFoundError, RateLimitedError } from '../errors.js';
import { fromPartnerOrder, fromPlatformDelivery, geoPoint } from '../mapping/delivery.js';
import type { Delivery, DeliveryStatus } from '../mapping/model.js';
import {
  courierIdentity,
  isDeliveryEvent,
  isLocationEvent,
  milestoneRank,
  sameCourier,
  stateOfStatus,
  statusRank,
  type CourierIdentity,
  type MilestoneState,
} from '../domain/milestones.js';
import { statusOfWebhook } from '../domain/status.js';
import { callerCursors } from '../domain/cursor.js';
import type { Store, StoredEvent } from '../store/store.js';
import type { JsonObject } from '../upstream/wire.js';
import type { Upstream } from '../upstream/clients.js';
import type { CheckAllowance, KeyBudget, ReadAccess, Withheld } from './access.js';
import type { EventBus } from './bus.js';
import { EventQueue } from './queue.js';
import type { DeliveryRead, Reconciler } from './reconcile.js';

/** A stored event, or the `snapshot` built from an upstream read when none is stored. */
export type EventView = StoredEvent & {
  /** Set on snapshots: the delivery as read, and its status. */
  snapshot?: { delivery: Delivery; status: DeliveryStatus };
  /**
   * Set by deliveryUpdated on an event that changed only the courier (courierOnly):
   * the delivery's status, which the event's own milestone is behind or repeats.
   */
  heldStatus?: DeliveryStatus;
  /**
   * Set on deliveryUpdated's first message: the delivery as known now (the
   * store's view, the read made as the subscription started merged in), which
   * may be more than was known after the event itself.
   */
  known?: JsonObject;
};

/** The status a message of deliveryUpdated shows. */
function statusOfView(event: EventView): DeliveryStatus {
  return event.snapshot?.status ?? event.heldStatus ?? statusOfWebhook(event.name, event.payload.status);
}

export interface RealtimeDeps {
  store: Store;
  bus: EventBus;
  access: ReadAccess;
  upstream: Upstream;
  /** Most events one subscriber may have waiting. */
  maxPending: number;
  /**
   * The key's rate-limit budget (RATE_LIMIT_PER_MINUTE): each upstream access check takes one unit, as an operation
   * does.
   */
  budget?: KeyBudget;
  /** Confirms the key with the upstream as a subscription starts, and reads followed deliveries when no event comes. */
  reconciler?: Reconciler;
}

export interface Subscriber {
  key: string;
  /** With a client token: the only uids it may follow (others read as not found, and deliveryEvents needs uids). */
  scope?: ReadonlySet<string>;
  /** Cuts the subscriber's connection off (WebSocket close) when it falls too far behind. */
  disconnect?(code: number, reason: string): void;
}

/** WebSocket close code for a subscriber that reads too slowly. */
export const SLOW_CONSUMER_CLOSE_CODE = 4008;

const REPLAY_PAGE = 500;
/** Pauses between asking again whether a key may see an event when the upstream could not say. */
const ACCESS_RETRY_MS = [250, 1_000, 3_000];
/** Positions waiting beyond this many events mean the reader lags: from then on only the latest counts. */
const COALESCE_AFTER = 16;

function queueFor(deps: RealtimeDeps, subscriber: Subscriber): EventQueue<StoredEvent> {
  return new EventQueue<StoredEvent>({
    maxPending: deps.maxPending,
    // Positions: the latest per delivery wins. Status events are never coalesced.
    coalesceKey: (event) => (isLocationEvent(event.name) ? event.uid : undefined),
    coalesceAfter: COALESCE_AFTER,
    onOverflow: (pending) =>
      subscriber.disconnect?.(SLOW_CONSUMER_CLOSE_CODE, `subscriber too slow: ${pending} events waiting`),
  });
}

/**
 * An async generator cannot be returned while it awaits: its return() waits in
 * line behind the pending next(), which waits for an event that may never come.
 * So the stream's own return() ends the queue first, which lets the generator
 * reach its `finally` (where the listener is removed).
 */
function closable<T>(generator: AsyncGenerator<T>, queue: EventQueue<StoredEvent>): AsyncGenerator<T> {
  const close = async (): Promise<IteratorResult<T>> => {
    await queue.return();
    return generator.return(undefined as never);
  };
  return {
    next: () => generator.next(),
    return: close,
    throw: async (error: unknown) => {
      await queue.return();
      return generator.throw(error);
    },
    [Symbol.asyncIterator]() {
      return this;
    },
    [Symbol.asyncDispose]: async () => {
      await close();
    },
  } as AsyncGenerator<T>;
}

/**
 * A uid the client named must be readable. Its upstream check, when it takes one,
 * draws on the key's budget (none of the subscription's own count: the client
 * named as many as it sent); with the budget spent, the subscription is refused
 * RATE_LIMITED, as an operation would be.
 */
async function assertReadable(
  deps: RealtimeDeps,
  subscriber: Subscriber,
  uid: string,
  allowance: CheckAllowance,
): Promise<void> {
  // A client token's other uids are not found, whatever its merchant key may read, and cost no upstream call.
  if (subscriber.scope && !subscriber.scope.has(uid))
    throw new NotFoundError(`No delivery ${uid} belongs to the caller.`);
  const readable = await deps.access.canRead(subscriber.key, uid, allowance);
  if (typeof readable !== 'boolean') throw new RateLimitedError(readable.retryAfterSeconds);
  if (!readable) throw new NotFoundError(`No delivery ${uid} belongs to the caller.`);
}

/**
 * The access to deliveries a stream named, as it goes on: checked again before
 * an event once an operator's claim of the uid has been learned since the last
 * check (src/access/owners.ts noticeClaims); a claim that gave the delivery to
 * another merchant ends the stream NOT_FOUND, as a subscription to it would be
 * refused now. Made before the first check (assertReadable), which it counts from.
 */
function accessKept(
  deps: RealtimeDeps,
  subscriber: Subscriber,
  uids: readonly string[],
): (uid: string) => Promise<void> | undefined {
  const started = Date.now();
  const checkedAt = new Map(uids.map((uid) => [uid, started]));
  const checkAgain = async (uid: string, since: number) => {
    const at = Date.now();
    if (!(await deps.access.stillReadable(subscriber.key, uid, since)))
      throw new NotFoundError(`No delivery ${uid} belongs to the caller.`);
    checkedAt.set(uid, at);
  };
  // Nothing learned since the last check: answered at once, with no promise (every event of every stream asks).
  return (uid) => {
    const since = checkedAt.get(uid) ?? started;
    return deps.access.stillReadableNow(uid, since) ? undefined : checkAgain(uid, since);
  };
}

/**
 * Starts following the delivery for reconciliation: a refused key ends the
 * stream by failing its queue. Returns the way to stop.
 */
function follow(deps: RealtimeDeps, subscriber: Subscriber, uid: string, queue: EventQueue<StoredEvent>): () => void {
  return deps.reconciler?.follow(uid, { key: subscriber.key, end: (error) => queue.fail(error) }) ?? (() => undefined);
}

/**
 * The reconciler's confirmation of the key (src/realtime/reconcile.ts), started
 * now and awaited later; a refusal that comes before it is awaited is not an
 * unhandled rejection.
 */
function confirmed(deps: RealtimeDeps, subscriber: Subscriber, uid: string): Promise<DeliveryRead | undefined> {
  const confirming = deps.reconciler ? deps.reconciler.confirm(subscriber.key, uid) : Promise.resolve(undefined);
  confirming.catch(() => undefined);
  return confirming;
}

/** The checks of uids the client named: the key's budget only. */
const namedUids = (deps: RealtimeDeps, subscriber: Subscriber) =>
  deps.access.allowance(subscriber.key, deps.budget, false);

/**
 * A `snapshot` event from an upstream read, for a delivery of which no event is
 * stored yet: the read made as the subscription started, or a new one.
 */
async function snapshotOf(
  deps: RealtimeDeps,
  key: string,
  uid: string,
  seq: number,
  read: DeliveryRead | undefined,
): Promise<EventView> {
  let delivery: Delivery;
  if (read) {
    delivery = read.group === 'platform' ? fromPlatformDelivery(read.wire) : fromPartnerOrder(read.wire);
  } else {
    try {
      delivery = fromPlatformDelivery(await deps.upstream.platform.get(key, uid));
    } catch (error) {
      if (!(error instanceof NotFoundError)) throw error;
      delivery = fromPartnerOrder(await deps.upstream.partner.getOrder(key, uid));
    }
  }
  return {
    seq,
    uid,
    name: 'snapshot',
    statusText: delivery.rawStatus,
    receivedAt: new Date().toISOString(),
    stale: false,
    courierOnly: false,
    payload: { uid, event_name: 'snapshot' },
    snapshot: { delivery, status: delivery.status },
  };
}

/** Whether a position belongs to the delivery's current courier (or no courier is known to tell). */
function isCurrentCourier(state: MilestoneState | undefined, event: StoredEvent): boolean {
  const named = courierIdentity(event.payload);
  return !named || !state?.courier || sameCourier(state.courier, named);
}

/** The courier a read names (reads keep driver_id null: the name is all there is). */
function snapshotCourier(delivery: Delivery) {
  return delivery.courier
    ? courierIdentity({ driver_id: delivery.courier.id, driver_name: delivery.courier.name })
    : undefined;
}

/**
 * What a stream that began from a read (a `snapshot`: no event stored yet) has
 * shown: the log may still bring events the read was ahead of. The store judged
 * them without the read (it never stored it), so they are weighed against what
 * was shown: a milestone behind it, or the same, is late for this subscriber,
 * unless it ends the delivery (the store's end is every subscriber's end) or
 * names another courier (sent with the status shown). Once an event beyond it
 * is sent, the store's verdicts alone decide.
 */
interface ReadShown {
  rank: number;
  courier: CourierIdentity | undefined;
}

/** Whether an event the store moved is late for a stream whose first message was a read. */
function lateForRead(shown: ReadShown | undefined, event: StoredEvent, rank: number): boolean {
  return shown !== undefined && !event.final && rank <= shown.rank;
}

/** Whether a late event names a courier other than the one the read showed (a reassignment). */
function namesAnotherCourier(shown: ReadShown, event: StoredEvent): boolean {
  const named = courierIdentity(event.payload);
  return named !== undefined && shown.courier !== undefined && !sameCourier(shown.courier, named);
}

/**
 * deliveryUpdated: the current state, then each accepted delivery.* event of a
 * known milestone; ends once the state is final (a final milestone, or a cancel
 * or failure a read confirmed: not while a return or second attempt may follow).
 */
export function deliveryUpdated(deps: RealtimeDeps, subscriber: Subscriber, uid: string): AsyncGenerator<EventView> {
  const queue = queueFor(deps, subscriber);
  return closable(deliveryUpdatedStream(deps, subscriber, uid, queue), queue);
}

async function* deliveryUpdatedStream(
  deps: RealtimeDeps,
  subscriber: Subscriber,
  uid: string,
  queue: EventQueue<StoredEvent>,
): AsyncGenerator<EventView> {
  const stillReadable = accessKept(deps, subscriber, [uid]);
  await assertReadable(deps, subscriber, uid, namedUids(deps, subscriber));
  const unlisten = deps.bus.listen(uid, (event) => {
    deps.reconciler?.heard(uid, event);
    if (!event.stale && isDeliveryEvent(event.name)) queue.push(event);
  });
  let unfollow = () => {};
  try {
    // Taken before the read: a stored state no event moved since then is older than what the read shows.
    const logPosition = await deps.store.lastSeq();
    // The upstream's word on the key, and the first state when none is stored.
    const read = await confirmed(deps, subscriber, uid);
    // What the read decides is stored first (it contradicts a final state, or confirms a cancel), so the first message
    // is it.
    if (read) await deps.reconciler?.applyRead(uid, read, logPosition, { atStart: true }).catch(() => undefined);
    // The state before the latest event: whatever moved it in between is folded in from the queue.
    const stored = await deps.store.deliveryState(uid);
    const latest = await deps.store.latestEvent(uid, 'delivery');
    unfollow = follow(deps, subscriber, uid, queue);
    let current: EventView = latest ?? (await snapshotOf(deps, subscriber.key, uid, logPosition, read));
    if (latest) {
      const known = await deps.store.deliveryView(uid);
      if (known) current = { ...current, known };
    }
    // The latest event changed only the courier: the status is the one of the event that last moved the milestone.
    if (current.courierOnly && stored) {
      const [mover] = await deps.store.eventsAfter(stored.seq - 1, 1, { uids: [uid] });
      if (mover?.seq === stored.seq) current = { ...current, heldStatus: statusOfView(mover) };
    }
    // A snapshot is a read the store never kept: events on their way that it was ahead of are late here.
    const snapshotRank = current.snapshot && statusRank(current.snapshot.status);
    let shown: ReadShown | undefined =
      snapshotRank === undefined
        ? undefined
        : { rank: snapshotRank, courier: snapshotCourier(current.snapshot!.delivery) };
    let lastSeq = current.seq;
    let status = statusOfView(current);
    // What a new event shows this subscriber, if anything.
    const viewOf = (event: StoredEvent, rank: number): EventView | undefined => {
      if (event.moved) {
        if (lateForRead(shown, event, rank))
          return namesAnotherCourier(shown!, event) ? { ...event, heldStatus: status } : undefined;
        // A read that only confirms the milestone sent last as final is not sent again: it ends the stream.
        if (event.final && statusRank(status) === rank) return undefined;
        shown = undefined;
        return event;
      }
      // A new courier on a late milestone: sent with the status the delivery has, which does not go back.
      return event.courierOnly ? { ...event, heldStatus: status } : undefined;
    };
    yield current;
    // Whether the delivery is final, as of the last event folded in: each queued event after the state read (or the
    // snapshot) carries the store's word on it.
    let final = current.snapshot
      ? stateOfStatus(current.snapshot.status)?.terminal === true
      : stored?.terminal === true;
    let foldedSeq = current.snapshot ? current.seq : (stored?.seq ?? 0);
    if (final) return;
    for await (const event of queue) {
      if (event.seq > foldedSeq) {
        foldedSeq = event.seq;
        final = event.final === true;
      }
      // Sent once, in log order, as the store judged it; an unknown milestone moves nothing and is not sent.
      const rank = milestoneRank(event.name);
      const view = event.seq > lastSeq && rank !== undefined ? viewOf(event, rank) : undefined;
      if (event.seq > lastSeq) lastSeq = event.seq;
      if (view) {
        status = statusOfView(view);
        const checking = stillReadable(uid);
        if (checking) await checking;
        yield view;
      }
      if (final) return;
    }
  } finally {
    unfollow();
    unlisten();
    await queue.return();
  }
}

/** courierLocation: each non-stale position of the delivery's courier, newest milestone only; ends at a final event. */
export function courierLocation(deps: RealtimeDeps, subscriber: Subscriber, uid: string): AsyncGenerator<StoredEvent> {
  const queue = queueFor(deps, subscriber);
  return closable(courierLocationStream(deps, subscriber, uid, queue), queue);
}

async function* courierLocationStream(
  deps: RealtimeDeps,
  subscriber: Subscriber,
  uid: string,
  queue: EventQueue<StoredEvent>,
): AsyncGenerator<StoredEvent> {
  const stillReadable = accessKept(deps, subscriber, [uid]);
  await assertReadable(deps, subscriber, uid, namedUids(deps, subscriber));
  const unlisten = deps.bus.listen(uid, (event) => {
    deps.reconciler?.heard(uid, event);
    if (event.stale) return;
    // Positions are what is sent; delivery.* events also move the state, and a final one ends the stream.
    // Only events with a usable position count as positions (a malformed one would break the non-null location).
    if (isDeliveryEvent(event.name) || geoPoint(event.payload.driver_location)) queue.push(event);
  });
  let unfollow = () => {};
  const confirming = confirmed(deps, subscriber, uid);
  try {
    const stored = await deps.store.deliveryState(uid);
    let lastSeq = 0;
    let lastRank = -1;
    const latest = await deps.store.latestEvent(uid, 'location');
    await confirming;
    unfollow = follow(deps, subscriber, uid, queue);
    // A position of a courier since replaced is no pin of the current one.
    if (latest && geoPoint(latest.payload.driver_location) && isCurrentCourier(stored, latest)) {
      lastSeq = latest.seq;
      lastRank = milestoneRank(latest.name) ?? -1;
      yield latest;
    }
    if (stored?.terminal) return;
    // Events up to the state read are in it; each later one carries the store's word on whether the delivery is final.
    let foldedSeq = stored?.seq ?? 0;
    for await (const event of queue) {
      if (event.seq > foldedSeq) {
        foldedSeq = event.seq;
        // The final event's own position is not sent.
        if (event.final) return;
      }
      if (event.seq <= lastSeq || !geoPoint(event.payload.driver_location)) continue;
      // A new courier's first position counts whatever its milestone; the rank the pin reached stays.
      const rank = event.courierOnly ? lastRank : (milestoneRank(event.name) ?? lastRank);
      if (rank < lastRank) continue;
      lastSeq = event.seq;
      lastRank = rank;
      const checking = stillReadable(uid);
      if (checking) await checking;
      yield event;
    }
  } finally {
    unfollow();
    unlisten();
    await queue.return();
  }
}

export interface DeliveryEventsArgs {
  uids?: readonly string[] | null;
  names?: readonly string[] | null;
  after?: string | null;
}

/**
 * Whether the key may see events of this delivery. When the upstream cannot say
 * (down, timing out), that is not a "no": the stream waits and asks again a few
 * times, in order; if it still cannot tell, the stream ends with that error, and
 * the client resumes with `after` once the upstream is back. An event is never
 * skipped for good because of an outage. A refused key (UNAUTHENTICATED) ends
 * the stream at once. Every try that reaches the upstream is one check of the
 * allowance; once it has none left the answer is Withheld.
 */
async function canReadPatiently(
  access: ReadAccess,
  key: string,
  uid: string,
  allowance: CheckAllowance,
): Promise<boolean | Withheld> {
  for (const pause of ACCESS_RETRY_MS) {
    try {
      return await access.canRead(key, uid, allowance);
    } catch (error) {
      // A refused key is an answer, not an outage: asking again would only cost the upstream calls.
      if ((error as { code?: unknown } | undefined)?.code === 'UNAUTHENTICATED') throw error;
      await new Promise((resolve) => setTimeout(resolve, pause));
    }
  }
  return access.canRead(key, uid, allowance);
}

/** deliveryEvents: stored events after the cursor, then live ones; only those the caller may see. */
export function deliveryEvents(
  deps: RealtimeDeps,
  subscriber: Subscriber,
  args: DeliveryEventsArgs,
): AsyncGenerator<StoredEvent> {
  const queue = queueFor(deps, subscriber);
  return closable(deliveryEventsStream(deps, subscriber, args, queue), queue);
}

async function* deliveryEventsStream(
  deps: RealtimeDeps,
  subscriber: Subscriber,
  args: DeliveryEventsArgs,
  queue: EventQueue<StoredEvent>,
): AsyncGenerator<StoredEvent> {
  const uids = args.uids && args.uids.length > 0 ? [...new Set(args.uids)] : undefined;
  // Every event of the merchant is more than a client token was given.
  if (subscriber.scope && !uids)
    throw new ForbiddenError('With a client token, deliveryEvents needs uids: those of the token.');
  const names = args.names && args.names.length > 0 ? new Set(args.names) : undefined;
  let afterSeq: number | undefined;
  if (args.after != null) {
    // The subscriber's merchant's cursors: one given to another merchant is not a cursor here.
    afterSeq = (await callerCursors(deps.store, await deps.access.merchantOf(subscriber.key))).seqOf(args.after);
    if (afterSeq === undefined)
      throw new BadUserInputError(`"${args.after}" is not a cursor of this facade's event log for this key.`);
  }
  const stillReadable = uids && accessKept(deps, subscriber, uids);
  if (uids) {
    const allowance = namedUids(deps, subscriber);
    for (const uid of uids) await assertReadable(deps, subscriber, uid, allowance);
  }
  // The upstream's word on the key: one call, whatever the uids (their reads come with reconciliation).
  await deps.reconciler?.confirmKey(subscriber.key);

  const push = (event: StoredEvent) => {
    if (uids) deps.reconciler?.heard(event.uid, event);
    queue.push(event);
  };
  const unlisteners = uids ? uids.map((uid) => deps.bus.listen(uid, push)) : [deps.bus.listen(undefined, push)];
  // Named deliveries are followed: read when no event comes, and the subscription ended if the key is refused.
  const unfollows = uids ? uids.map((uid) => follow(deps, subscriber, uid, queue)) : [];

  // Without uids, every merchant's events pass by. Owner records leave out other keys' deliveries and let the
  // key's own through for free; a delivery with no record is asked of the upstream within SUBSCRIPTION_ACCESS_CHECKS
  // a minute and the key's budget, and past them its event is skipped, undelivered (counted, logged once).
  const allowance = uids ? undefined : deps.access.allowance(subscriber.key, deps.budget, true);
  // At once when it can be (every event of every stream asks): false, true, or a promise of the answer.
  const visible = (event: StoredEvent): boolean | Promise<boolean> => {
    if (names && !names.has(event.name)) return false;
    const checking = stillReadable?.(event.uid);
    if (!allowance) return checking ? checking.then(() => true) : true;
    const asked = () =>
      canReadPatiently(deps.access, subscriber.key, event.uid, allowance).then((readable) => readable === true);
    return checking ? checking.then(asked) : asked();
  };

  try {
    // Without a cursor everything queued is new: the listener came first.
    let position = afterSeq ?? 0;
    if (afterSeq !== undefined) {
      for (;;) {
        const page = await deps.store.eventsAfter(position, REPLAY_PAGE, uids ? { uids } : undefined);
        for (const event of page) {
          position = event.seq;
          const shown = visible(event);
          if (shown === true || (shown !== false && (await shown))) yield event;
        }
        if (page.length < REPLAY_PAGE) break;
      }
    }
    for await (const event of queue) {
      if (event.seq <= position) continue;
      position = event.seq;
      const shown = visible(event);
      if (shown === true || (shown !== false && (await shown))) yield event;
    }
  } finally {
    for (const unfollow of unfollows) unfollow();
    for (const unlisten of unlisteners) unlisten();
    await queue.return();
  }
}

// What the facade keeps: idempotency keys, ownership of deliveries (booked
// through it, or found readable by a key's access check), and (see the events
// part) the webhook event log. The embedded
// SQLite store and the Redis store both serve this interface.
import { statusRank, type CourierIdentity, type MilestoneState } from '../domain/milestones.js';
import { deliveryStatus } from '../domain/status.js';
import type { JsonObject, WireWebhookEvent } from '../upstream/wire.js';

/**
 * A booking left pending this long lost its process mid-call: whether it was sent
 * is unknown, so the claim turns 'unknown' (see IdempotencyClaim) rather than free.
 */
export const PENDING_EXPIRY_MS = 120_000;

export interface BookingResult {
  uid: string;
  trackingUrl: string | null;
}

export type IdempotencyClaim =
  /** The key is new: the caller books, then calls completeIdempotency or releaseIdempotency. */
  | { state: 'claimed' }
  /** The same input was booked before: return this, book nothing. */
  | { state: 'done'; result: BookingResult }
  /** Another request with this key is booking right now. */
  | { state: 'pending' }
  /** The key was used with different input. */
  | { state: 'conflict' }
  /**
   * The booking was sent but its answer was lost (a timeout, a dropped connection),
   * so the upstream may have booked it: nothing may be booked with this key. It turns
   * 'done' when a webhook carrying the booking's marker arrives (resolveBookingMarker);
   * otherwise it stays until the idempotency retention, counted from `since`, ends it.
   */
  | { state: 'unknown'; since: Date };

/** A verified webhook event as the store keeps it. */
export interface StoredEvent {
  /** Position in the event log; increases with every stored event. */
  seq: number;
  uid: string;
  name: string;
  statusText: string | null;
  /** When the facade received it, ISO 8601 UTC. */
  receivedAt: string;
  /**
   * True when it arrived after a later milestone, as a repeat of the current one, or after a final one, and named
   * no new courier; or when it came from a courier already replaced (src/domain/milestones.ts). It moved no status.
   */
  stale: boolean;
  /**
   * Not stale, but it changed only the courier: a reassignment whose milestone is behind the delivery's or repeats it.
   */
  courierOnly: boolean;
  /** Present (true) when it contradicted where the delivery stood: a read of the upstream settles it. */
  contradicts?: true;
  /**
   * Present (true) when it moved the delivery's milestone, or (a confirming read) made it final: it is the state's last
   * mover. Judged once, as the event was stored; the subscription streams and reconciliation follow it.
   */
  moved?: true;
  /** Present (true) when the delivery was final after it: nothing later moves it. */
  final?: true;
  /** The event exactly as received (or, `facade_source: "poll"`, as made from a read). */
  payload: WireWebhookEvent;
  /**
   * What the delivery's view held after this event beyond its own payload: fields carried over
   * from earlier events and reads (src/domain/delivery-view.ts). Absent when nothing was.
   */
  carried?: JsonObject;
}

/** Carried by the Redis store, so that others can tell it without loading its module (store/open.ts: redisOf). */
export const REDIS_STORE = Symbol('redis store');

/**
 * The bits of an event's stored mark (SQLite's `stale` column, the Redis entry's `stale` field), the store's verdict on
 * it: 0 accepted, moving nothing; the Redis append script writes the same bits.
 */
export const MARK = Object.freeze({ stale: 1, courierOnly: 2, contradicts: 4, moved: 8, final: 16 });

/** The mark of a judged event: its transition (src/domain/milestones.ts), and whether the delivery is final after it. */
export function markOf(step: {
  stale: boolean;
  courierOnly: boolean;
  contradicts?: boolean;
  moved?: boolean;
  state?: { terminal: boolean } | undefined;
}): number {
  return (
    (step.stale ? MARK.stale : 0) |
    (step.courierOnly ? MARK.courierOnly : 0) |
    (step.contradicts ? MARK.contradicts : 0) |
    (step.moved ? MARK.moved : 0) |
    (step.state?.terminal ? MARK.final : 0)
  );
}

/** The flags of a stored mark, as StoredEvent has them. */
export function flagsOf(mark: number): Pick<StoredEvent, 'stale' | 'courierOnly' | 'contradicts' | 'moved' | 'final'> {
  const flags: Pick<StoredEvent, 'stale' | 'courierOnly' | 'contradicts' | 'moved' | 'final'> = {
    stale: (mark & MARK.stale) !== 0,
    courierOnly: (mark & MARK.courierOnly) !== 0,
  };
  if (mark & MARK.contradicts) flags.contradicts = true;
  if (mark & MARK.moved) flags.moved = true;
  if (mark & MARK.final) flags.final = true;
  return flags;
}

/** The endpoint group a delivery lives in, as the owner record knows it. */
export type OwnerGroup = 'PLATFORM' | 'PARTNER';

/**
 * How the facade came to know a delivery's owner. All but `read` are scoped to
 * the merchant whatever the upstream's read scope: `booked` through the facade
 * (or found by its booking marker), `reference` read by partner reference with
 * the merchant's key, `canceled` with it, `claimed` by an operator (npm run
 * merchant). `read`: a read by uid answered the key 200, which proves ownership
 * only on an upstream whose reads are scoped to the key (src/access/owners.ts).
 */
export type OwnerProof = 'booked' | 'reference' | 'canceled' | 'claimed' | 'read';

/** Who a delivery belongs to, as the facade recorded it (src/access/owners.ts decides with it). */
export interface OwnerRecord {
  /**
   * The merchant id (src/access/merchants.ts): the hash of the merchant's first key, or of the key that read it in
   * records made before merchants.
   */
  owner: string;
  /** null for a record made before groups were kept. */
  group: OwnerGroup | null;
  /** null for a record made before proofs were kept: it counts as a read. */
  proof: OwnerProof | null;
}

export interface OwnerEntry extends Omit<OwnerRecord, 'proof'> {
  uid: string;
  /** `read` when not given. */
  proof?: OwnerProof | null;
  /** Replaces whatever record the uid has (an operator's claim); otherwise see supersedes(). */
  replace?: boolean;
}

/**
 * Whether a record's proof holds whatever the upstream's read scope: everything but a read (or a record from before
 * proofs).
 */
export function merchantScoped(proof: OwnerProof | null | undefined): boolean {
  return proof != null && proof !== 'read';
}

/**
 * The rule both stores write owner records by: the first record stays, except
 * that a merchant-scoped proof replaces a record learned from a read (a
 * platform-scoped 200 proves nothing), and an operator's claim replaces any.
 */
export function supersedes(
  next: Pick<OwnerEntry, 'proof' | 'replace'>,
  current: Pick<OwnerRecord, 'proof'> | undefined,
): boolean {
  if (!current || next.replace) return true;
  return merchantScoped(next.proof) && !merchantScoped(current.proof);
}

export interface AppendResult {
  event: StoredEvent;
  /** Same uid, event name and canonical payload as an event already stored: nothing new was written. */
  duplicate: boolean;
}

/**
 * When an event made from a read is worth storing, judged by the store as it judges the event: `accepted`, unless it
 * is stale; `decisive`, only when it moves a final state (the read contradicts an end and wins) or confirms the
 * delivery's milestone as final (reconciliation at a subscription's start: a read merely ahead of the log may have
 * webhooks on their way, which it would make stale).
 */
export type AppendCondition = 'accepted' | 'decisive';

/** An event to store: received, or made from a read and stored only on its condition. */
export interface EventInput {
  payload: WireWebhookEvent;
  receivedAt: string;
  onlyIf?: AppendCondition;
}

/** An event received: stored whatever the store judges of it. */
export type ReceivedEvent = EventInput & { onlyIf?: undefined };

/** A conditional event whose condition did not hold: nothing was stored, nothing changed. */
export interface NotStored {
  skipped: true;
}

/** A delivery's milestone state (see src/domain/milestones.ts) and the event that last moved its milestone. */
export interface DeliveryState extends MilestoneState {
  seq: number;
}

/** What a read of the upstream showed, for the delivery's view (src/realtime/reconcile.ts readBody). */
export interface ReadRecord {
  uid: string;
  /** The read as a webhook body, with what only reads carry (tracking link, style, fees, the scheduled datetime). */
  body: JsonObject;
  /** The log's last seq when the read was made: the read overwrites only a view whose state no event moved since. */
  basis: number;
  /** When the read was made (ms since the epoch): what it confirms, it confirms as of then. Now when not given. */
  readAt?: number;
}

/**
 * A delivery's view with when the upstream last confirmed it (src/graphql/delivery-reads.ts decides with it): a read
 * confirms every field it returned, a webhook event the fields events carry.
 */
export interface ConfirmedView {
  /** The view as a webhook body (Store.deliveryView). */
  body: JsonObject;
  /**
   * When the newest read merged into it was made (ms since the epoch); negative when that read found the view behind
   * the upstream (readConfirmation); undefined when none is kept.
   */
  readAt: number | undefined;
  /** When the newest event that moved or repeated its state (not stale) was received; undefined before any. */
  eventAt: number | undefined;
  /** A read confirmed a final state: nothing changes it any more. */
  settled: boolean;
}

/**
 * What a read confirms of its delivery's view (both stores write it the same way). It agrees when the log's state is at
 * the milestone the read says: then it confirms the view as of when it was made, and settles it when that state is
 * final. Otherwise (no state yet, or a webhook lost or still on its way) the view is behind the upstream as of the
 * read: kept as a negative time, so that only a later event vouches for it again (confirmedAt in
 * src/graphql/delivery-reads.ts).
 */
export function readConfirmation(
  status: unknown,
  state: { rank: number; terminal: boolean } | undefined,
  readAt: number,
): { at: number; settled: boolean } {
  const rank = statusRank(deliveryStatus(status));
  const agrees = rank !== undefined && state !== undefined && Math.floor(state.rank) === Math.floor(rank);
  return { at: agrees ? readAt : -readAt, settled: agrees && state.terminal };
}

/**
 * How both stores write a courier identity: JSON with the absent parts left out (the Redis script reads it with cjson).
 */
export function courierJson(courier: CourierIdentity): string {
  return JSON.stringify(wireCourier(courier));
}

export function formerCouriersJson(formers: readonly CourierIdentity[]): string {
  return JSON.stringify(formers.map(wireCourier));
}

const wireCourier = (courier: CourierIdentity) => ({ id: courier.id ?? undefined, name: courier.name ?? undefined });

const identityOf = (value: { id?: string; name?: string }): CourierIdentity => ({
  id: value.id ?? null,
  name: value.name ?? null,
});

/** The courier part of a stored state: only what is there, as judge() builds it. */
export function courierPart(
  courier: string | null | undefined,
  formers: string | null | undefined,
): Pick<MilestoneState, 'courier' | 'formerCouriers'> {
  const part: Pick<MilestoneState, 'courier' | 'formerCouriers'> = {};
  if (courier) part.courier = identityOf(JSON.parse(courier) as { id?: string; name?: string });
  // Redis's cjson writes an empty list as {}: no entries either way.
  const list = formers
    ? Object.values(JSON.parse(formers) as Record<string, { id?: string; name?: string }>).map(identityOf)
    : [];
  if (list.length > 0) part.formerCouriers = list;
  return part;
}

/**
 * A delivery reconciliation may read though nobody follows it: known to the facade, not final (src/realtime/sweeps.ts).
 */
export interface UnfinishedDelivery {
  uid: string;
  /** The group its owner record names; null when the record has none. */
  group: OwnerGroup | null;
}

/** One page of an owner's unfinished deliveries. */
export interface UnfinishedPage {
  deliveries: UnfinishedDelivery[];
  /** Where the next page starts (opaque, this store's own); undefined after the last. */
  next: string | undefined;
}

/**
 * What linkMerchant did. A merchant id has history when an owner record or an
 * idempotency claim (within their retentions) names it, or another id is linked
 * to it: linking it to another merchant would leave those behind (claims, cursors
 * and reconciliation go by the exact id), so it stays a root.
 */
export type MerchantLink =
  /** The root without history is now an id of `merchant`, which both ids lead to. */
  | { outcome: 'linked'; merchant: string }
  /** Both ids led to `merchant` already: nothing changed. */
  | { outcome: 'same'; merchant: string }
  /** Both roots have history: nothing was linked. */
  | { outcome: 'refused' };

/** What mergeMerchant did. */
export interface MerchantMerge {
  /** The merchant both ids lead to now (the root of `into`). */
  merchant: string;
  /** The root linked into it by this merge; undefined when both ids led to `merchant` already. */
  merged: string | undefined;
  /** Owner records moved to `merchant`. */
  records: number;
  /** Idempotency claims moved to `merchant`. */
  claims: number;
  /** Idempotency keys both merchants had used: `merchant`'s claim stays, the merged one's is dropped. */
  conflicts: number;
}

/** What ownerClaimsAfter answers. */
export interface OwnerClaims {
  version: number;
  /** The uids claimed since the version asked after; undefined when not all of them are kept. */
  uids: string[] | undefined;
}

/**
 * Operator claims a shared store keeps for running instances to learn (ownerClaimsAfter): far more than are made
 * between two of their checks.
 */
export const OWNER_CLAIMS_KEPT = 1_000;

export interface EventFilter {
  /** Only events of these deliveries. */
  uids?: readonly string[];
}

export interface Store {
  /**
   * Stores events durably, in order, with de-duplication and milestone ranking; resolves once they are on disk.
   * When only some events fail, the others are still stored and a PartialAppendError carries every outcome.
   */
  appendEvents(events: ReadonlyArray<ReceivedEvent>): Promise<AppendResult[]>;
  /** The same, with events made from reads that are stored only on their condition. */
  appendEvents(events: ReadonlyArray<EventInput>): Promise<Array<AppendResult | NotStored>>;
  /** Events after `afterSeq` (exclusive), oldest first. */
  eventsAfter(afterSeq: number, limit: number, filter?: EventFilter): Promise<StoredEvent[]>;
  /**
   * The latest non-stale `delivery.*` event of a delivery, or the latest non-stale event that carries a courier
   * position.
   */
  latestEvent(uid: string, kind: 'delivery' | 'location'): Promise<StoredEvent | undefined>;
  /** Where the delivery stands, as its accepted `delivery.*` events left it; undefined before the first. */
  deliveryState(uid: string): Promise<DeliveryState | undefined>;
  /**
   * The delivery as known now, as a webhook body: every event's fields and the reads merged
   * (src/domain/delivery-view.ts); undefined before its first state.
   */
  deliveryView(uid: string): Promise<JsonObject | undefined>;
  /**
   * Merges a read into the delivery's view; for a delivery with no state yet it is kept apart, for the retention, and
   * its first event is merged over it.
   */
  recordRead(read: ReadRecord): Promise<void>;
  /** The views of those uids that have one, each with when the upstream last confirmed it (one read for all). */
  confirmedViews(uids: readonly string[]): Promise<Map<string, ConfirmedView>>;
  /** The seq of the newest event stored (0 when none). */
  lastSeq(): Promise<number>;

  /** Claims the key for a booking; a new claim also records the key's booking marker (src/domain/booking-marker.ts). */
  claimIdempotency(ownerHash: string, idempotencyKey: string, fingerprint: string): Promise<IdempotencyClaim>;
  completeIdempotency(ownerHash: string, idempotencyKey: string, result: BookingResult): Promise<void>;
  /**
   * The booking certainly booked nothing: a pending (or unknown) claim is deleted, so the key is free again. A done one
   * stays.
   */
  releaseIdempotency(ownerHash: string, idempotencyKey: string): Promise<void>;
  /**
   * The booking's answer was lost: a pending claim turns 'unknown' as of now. Returns
   * the claim as it then stands: 'done' when a webhook already resolved it.
   */
  markIdempotencyUnknown(ownerHash: string, idempotencyKey: string): Promise<IdempotencyClaim>;
  /**
   * A webhook carried a booking marker: the pending or unknown claim it marks turns
   * 'done' with this result. Returns the owner hash of that claim, or undefined when
   * no pending or unknown claim has this marker (unknown marker, or already done).
   */
  resolveBookingMarker(marker: string, result: BookingResult): Promise<string | undefined>;
  /**
   * Records that `uid` belongs to the merchant `owner`, in `group` when it is
   * known, and how that is known (`read` when not given). The first record
   * stays but for what supersedes() lets replace it; one it keeps is proved
   * again by `owner` when it is the record's (its retention counts from now),
   * as it is by every event of its delivery (appendEvents).
   */
  recordOwner(uid: string, owner: string, group?: OwnerGroup, proof?: OwnerProof): Promise<void>;
  /** The same for many at once, in one write. */
  recordOwners(records: readonly OwnerEntry[]): Promise<void>;
  ownerOf(uid: string): Promise<string | undefined>;
  /** The records of those uids that have one (one read for all). */
  ownersOf(uids: readonly string[]): Promise<Map<string, OwnerRecord>>;
  /**
   * The merchant ids the given key hashes (or merchant ids) are linked to, one
   * step (src/access/merchants.ts follows the chain): those that have a link.
   * Links never expire with the retention: they are who a merchant is.
   */
  merchantLinks(ids: readonly string[]): Promise<Map<string, string>>;
  /**
   * Makes the merchants two ids stand for (each followed to its root) one, in
   * one step, without moving anything a merchant owns: a root with history (see
   * MerchantLink) is never linked to another. The root without history is
   * linked to the other's, `key`'s when neither has any; when both have, nothing
   * is linked (`refused`: an operator merges them, mergeMerchant).
   */
  linkMerchant(key: string, previous: string): Promise<MerchantLink>;
  /**
   * An operator's deliberate merge of two merchants that both have history: the
   * root `from` leads to is linked to the root of `into` (ids linked to it with
   * it), and then everything recorded under an id that leads to that root (owner
   * records and idempotency claims, with their booking markers) is moved to the
   * root itself, so that it is found by the id a merchant is known by. Running it
   * again moves what was recorded under the merged ids since (by instances that
   * had not yet read the link). Cursors are derived from the merchant id: those
   * given to the merged merchant are not the new one's (src/domain/cursor.ts).
   * Redis moves in steps, not atomically (SQLite in one transaction).
   */
  mergeMerchant(from: string, into: string): Promise<MerchantMerge>;
  /** Removes the link of `id` (an operator undoing a link): true when there was one. */
  unlinkMerchant(id: string): Promise<boolean>;
  /**
   * The operator's claims (owner records written with `replace`) made since
   * `after`, a version this store answered before: the uids claimed, and the
   * version now; `uids` undefined when more were claimed since than the store
   * keeps (OWNER_CLAIMS_KEPT: anything may have changed). Without `after`: the
   * version alone. Running instances ask, so that a claim replaces what they
   * remembered of a delivery's owner (src/access/owners.ts). A store only one
   * process opens (SQLite, which the operator's command opens only while the
   * facade is stopped) has none to tell: version 0.
   */
  ownerClaimsAfter(after: number | undefined): Promise<OwnerClaims>;
  /**
   * The deliveries of one owner that the facade knows (an owner record made no
   * earlier than `since`, ms since the epoch: booked, read or resolved through
   * it) and that are not final (no state yet, or a state that is not terminal),
   * a page at a time from `after` (undefined: the start). A page holds at most
   * `limit` deliveries and may hold fewer (even none) before the end: each call
   * looks at a bounded number of records.
   */
  unfinishedDeliveries(
    owner: string,
    after: string | undefined,
    options: { limit: number; since: number },
  ): Promise<UnfinishedPage>;
  /**
   * Takes the leases named, each for `forMs` from now, and returns those it took:
   * another instance sharing the store holds the others. A lease this instance
   * (this store object) holds already is taken again. Reconciliation takes one
   * before each read of a delivery nobody follows here, so that instances do not
   * all read it. A store only one process opens (SQLite) grants every lease.
   */
  leaseReads(leases: readonly string[], forMs: number): Promise<Set<string>>;
  /** Gives back those of the leases named that this instance holds, before they expire; another instance's stay. */
  releaseReads(leases: readonly string[]): Promise<void>;
  /**
   * A random secret kept with the data, created on first use: the same for every
   * instance that shares the store and across restarts. Cursors are derived from it
   * (src/domain/cursor.ts).
   */
  cursorSecret(): Promise<Buffer>;
  /** Resolves once the store answers a write (SQLite) or a PING (Redis): readiness. */
  ping(): Promise<void>;
  close(): Promise<void>;
}

/**
 * Some events of a batch could not be stored; the others were (and are in
 * `outcomes`). Thrown by appendEvents so that one bad event fails only itself.
 */
export class PartialAppendError extends Error {
  override name = 'PartialAppendError';
  constructor(readonly outcomes: ReadonlyArray<AppendResult | NotStored | Error>) {
    const failed = outcomes.filter((outcome) => outcome instanceof Error).length;
    super(`${failed} of ${outcomes.length} events could not be stored`);
  }
}

// Owner records and their rule (docs/architecture.md, "Who may see a delivery"):
// what a record says of a caller (ownerVerdict); src/access/prove.ts proves what
// it leaves open and learns what proved it. A merchant, not a key, owns a
// delivery (src/access/merchants.ts), and what proves it depends on the
// upstream's read scope (UPSTREAM_READ_SCOPE):
// - `platform`, as the document reads ("no delivery with this uid belongs to the
//   platform"): a read's 200 proves nothing. Only merchant-scoped proofs make a
//   record (a booking through the facade, a read by partner reference with the
//   merchant's key, a cancel the upstream made for it, an operator's claim; see
//   OwnerProof), and such a proof replaces a record learned from a read. A
//   delivery nobody has proven to own is nobody's: not found for every caller.
// - `key`: the upstream answers each key for its own merchant's deliveries only,
//   so it decides; records are a cache of what it said (a read's 200 is recorded).
// A booking is recorded here too (recordBooking): the upstream made it, so its
// caller gets it even when the store cannot write; the record then waits in
// memory, answers lookups from there, and is written when the store writes again.
// An operator's claim (npm run merchant -- claim) replaces any record, from
// another process: an instance asks the store for the claims made since it last
// asked at most every CLAIM_CHECK_MS, on its next lookup, and forgets what it
// remembered of those uids (noticeClaims; ReadAccess and the streams that named
// a uid ask it too).
import type { ReadScope } from '../config.js';
import type { Logger } from '../logger.js';
import {
  merchantScoped,
  supersedes,
  type BookingResult,
  type OwnerEntry,
  type OwnerGroup,
  type OwnerProof,
  type OwnerRecord,
  type Store,
} from '../store/store.js';
import { Merchants } from './merchants.js';

/**
 * What the record says of one caller: its own, another merchant's, or nothing that decides (the upstream, or a proof,
 * may).
 */
export type OwnerVerdict = 'own' | 'other' | 'unknown';

/**
 * The rule, from the facts it rests on: the record (or its absence), the
 * merchant its owner id stands for now, the caller's merchant, and the scope.
 * A record learned from a read proves another merchant's ownership only on a
 * key-scoped upstream; on a platform-scoped one it decides nothing for anyone
 * but its owner (who keeps it: records made before proofs were kept still work).
 */
export function ownerVerdict(
  record: OwnerRecord | undefined,
  ownerMerchant: string | undefined,
  caller: string,
  scope: ReadScope,
): OwnerVerdict {
  if (!record) return 'unknown';
  if ((ownerMerchant ?? record.owner) === caller) return 'own';
  return scope === 'key' || merchantScoped(record.proof) ? 'other' : 'unknown';
}

/** A record and what it says of one caller. */
export interface Judged {
  verdict: OwnerVerdict;
  record: OwnerRecord | undefined;
}

/**
 * Records found in the store are kept in memory, bounded in bytes: a record
 * changes only when a merchant-scoped proof replaces one learned from a read
 * (or an operator claims the delivery), so a kept proof is true until it
 * expires with the retention; this bound is far below it. Absences are never
 * kept (another instance may write the record any moment).
 */
export const OWNER_CACHE_BYTES = 8 * 1024 * 1024;
const CACHED_FOR_MS = 10 * 60_000;
/**
 * A record a merchant-scoped proof may still replace (on a platform-scoped upstream), from another instance too: kept
 * this long only.
 */
const REPLACEABLE_FOR_MS = 5_000;
/**
 * How often an instance asks the store for operator claims made since it last
 * asked (one small read, made by the first lookup after it is due): a claim
 * counts on every instance within about this long.
 */
export const CLAIM_CHECK_MS = 2_000;
/**
 * Uids claimed lately whose claim time is kept for the answers cached elsewhere (ReadAccess, streams); the oldest go
 * first.
 */
const MAX_CLAIMED = 10_000;
/**
 * Records learned from reads wait this long to be written together: at most
 * twenty commits (each an fsync on the embedded store) a second, however many
 * first reads arrive. A crash loses at most this much; those reads ask again.
 */
const LEARN_FLUSH_MS = 50;
/** A uid, the shared hash string's reference, the group and the Map entry: about this much. */
const ENTRY_OVERHEAD_BYTES = 160;
/**
 * Bookings whose record the store refused wait in memory up to this many bytes
 * (by the length of what each holds): tens of thousands of bookings, hours of a
 * busy merchant's traffic. Past it a booking is still answered, but its record
 * is only logged (docs/limits.md, "Bookings the store could not record").
 */
export const UNRECORDED_BOOKING_BYTES = 8 * 1024 * 1024;
/** The first retry of unrecorded bookings, doubled after each failed one up to the second. */
const RECORD_RETRY_MS = 1_000;
const RECORD_RETRY_MAX_MS = 30_000;
/** The Map entries, the result, the flags: about this much beside the strings. */
const BOOKING_OVERHEAD_BYTES = 400;

/** A booking the upstream made, as the facade records it. */
export interface BookingRecord {
  result: BookingResult;
  /** The booking merchant's id (src/access/merchants.ts). */
  owner: string;
  group: OwnerGroup;
  /**
   * With an idempotency key: the claim to complete with the result, and the fingerprint of the input it was claimed
   * for.
   */
  claim?: { idempotencyKey: string; fingerprint: string };
}

/** A booking whose record waits for the store: which of its two writes are still to do. */
interface Unrecorded {
  booking: BookingRecord;
  ownerWritten: boolean;
  claimWritten: boolean;
  bytes: number;
}

interface Cached {
  record: OwnerRecord;
  bytes: number;
  expires: number;
  /** When this instance last wrote the record, or a proof of it (ms since the epoch). */
  provedAt: number;
}

export interface OwnersOptions {
  logger?: Logger;
  cacheBytes?: number;
  /** At most this many bytes of bookings wait in memory for the store (UNRECORDED_BOOKING_BYTES). */
  unrecordedBytes?: number;
  /** UPSTREAM_READ_SCOPE; platform when not given, as the upstream's document reads. */
  readScope?: ReadScope;
  /** The app's merchants; a private set on the store when not given. */
  merchants?: Merchants;
  /** How often a kept record's own merchant proving it again is written (the store's proofRefreshMs); a minute when not given. */
  proofRefreshMs?: number;
}

export class Owners {
  readonly #store: Store;
  readonly #logger: Logger | undefined;
  readonly #cacheBytes: number;
  readonly #cache = new Map<string, Cached>();
  /** Where eviction goes on (see #remember): every entry before it has been evicted. */
  #evictions: MapIterator<[string, Cached]> = this.#cache.entries();
  #bytes = 0;
  /** Records learned from reads, written together every LEARN_FLUSH_MS (one commit for many). */
  #pending = new Map<string, OwnerEntry>();
  #writing: Promise<void> | undefined;
  #scheduled = false;
  /** Records written, and record writes that failed (the answer stood; a later read asks again): read by /metrics. */
  readonly counters = { recorded: 0, failed: 0 };
  /**
   * Bookings the store could not record yet, by uid; and the same by claim (owner hash and idempotency key), for a
   * retry of the key.
   */
  readonly #unrecorded = new Map<string, Unrecorded>();
  readonly #unrecordedClaims = new Map<string, Unrecorded>();
  #unrecordedBytes = 0;
  #retrying: Promise<void> | undefined;
  #retryTimer: NodeJS.Timeout | undefined;
  #retryMs = RECORD_RETRY_MS;
  readonly #unrecordedLimit: number;
  readonly scope: ReadScope;
  readonly merchants: Merchants;
  readonly #proofRefreshMs: number;
  /**
   * The store's claims version this instance has seen (undefined before it first asked), when it last asked, and the
   * check under way.
   */
  #claimsVersion: number | undefined;
  #claimsCheckedAt = 0;
  #claimsCheck: Promise<void> | undefined;
  /**
   * Uids claimed by an operator, and when this instance learned it; #allClaimedAt: when it last lost track of which
   * (too many).
   */
  readonly #claimed = new Map<string, number>();
  #allClaimedAt = 0;
  #claimsFailing = false;

  constructor(store: Store, options: OwnersOptions = {}) {
    this.#store = store;
    this.#logger = options.logger;
    this.#cacheBytes = options.cacheBytes ?? OWNER_CACHE_BYTES;
    this.#unrecordedLimit = options.unrecordedBytes ?? UNRECORDED_BOOKING_BYTES;
    this.scope = options.readScope ?? 'platform';
    this.merchants = options.merchants ?? new Merchants(store);
    this.#proofRefreshMs = options.proofRefreshMs ?? 60_000;
  }

  /**
   * What the records say of the merchant `caller` for each uid: one lookup for
   * all, and one resolution of the owners that are not the caller's own id
   * (a key of the caller's merchant from before a link, or another merchant).
   */
  async judge(uids: readonly string[], caller: string): Promise<Map<string, Judged>> {
    const records = await this.lookup(uids);
    const others = [
      ...new Set([...records.values()].map((record) => record.owner).filter((owner) => owner !== caller)),
    ];
    const roots = others.length > 0 ? await this.merchants.roots(others) : undefined;
    const judged = new Map<string, Judged>();
    for (const uid of uids) {
      const record = records.get(uid);
      judged.set(uid, {
        record,
        verdict: ownerVerdict(record, record && roots?.get(record.owner), caller, this.scope),
      });
    }
    return judged;
  }

  async judgeOne(uid: string, caller: string): Promise<Judged> {
    return (await this.judge([uid], caller)).get(uid)!;
  }

  /** The records of those uids that have one: from memory, the rest in one store read. */
  async lookup(uids: readonly string[]): Promise<Map<string, OwnerRecord>> {
    const claims = this.noticeClaims();
    if (claims) await claims;
    const found = new Map<string, OwnerRecord>();
    const missing: string[] = [];
    const now = Date.now();
    for (const uid of uids) {
      const known = this.#known(uid, now);
      if (known) found.set(uid, known);
      else missing.push(uid);
    }
    if (missing.length === 0) return found;
    const stored = await this.#store.ownersOf(missing);
    for (const [uid, record] of stored) {
      // A record learned meanwhile (pending, not written yet) decides by the stores' rule.
      const pending = this.#pending.get(uid);
      const kept =
        pending && supersedes(pending, record)
          ? { owner: pending.owner, group: pending.group, proof: pending.proof ?? 'read' }
          : record;
      if (kept === record) this.#remember(uid, record, now);
      found.set(uid, kept);
    }
    return found;
  }

  async lookupOne(uid: string): Promise<OwnerRecord | undefined> {
    return (await this.lookup([uid])).get(uid);
  }

  /**
   * What the facade learned of `uid`'s owner, and how (`read`: a key-scoped
   * upstream let the merchant's key read it). Kept when nothing is recorded, or
   * when it is a merchant-scoped proof and the record is not (supersedes()).
   * Kept in memory at once, so this instance decides with it right away;
   * written to the store within LEARN_FLUSH_MS, with whatever else was learned by then.
   * A proof by the merchant a kept record names proves that record again: it is
   * written again (at most once per proofRefreshMs), so its retention counts from now.
   */
  learn(uid: string, owner: string, group: OwnerGroup, proof: OwnerProof): void {
    const entry = { uid, owner, group, proof };
    const now = Date.now();
    const known = this.#known(uid, now);
    if (known && !supersedes(entry, known)) {
      const cached = this.#cache.get(uid);
      if (!cached || cached.record.owner !== owner || now - cached.provedAt < this.#proofRefreshMs) return;
      cached.provedAt = now;
      this.#pend({ uid, ...cached.record });
      return;
    }
    const pending = this.#pending.get(uid);
    if (pending && !supersedes(entry, { proof: pending.proof ?? 'read' })) return;
    this.#pend(entry);
  }

  /** Writes a record within LEARN_FLUSH_MS, with whatever else was learned by then. */
  #pend(entry: OwnerEntry): void {
    this.#pending.set(entry.uid, entry);
    if (this.#scheduled) return;
    this.#scheduled = true;
    setTimeout(() => {
      this.#scheduled = false;
      void this.#flushLearned();
    }, LEARN_FLUSH_MS).unref();
  }

  /**
   * Records a booking the upstream made: its owner and, with an idempotency key,
   * the claim's result. Never fails: a write the store refuses is logged once
   * with the uid, kept in memory (lookups and unrecordedClaim answer from there)
   * and written again on a timer, after the next write that works, and at stop.
   */
  async recordBooking(booking: BookingRecord): Promise<void> {
    const { result, owner, group, claim } = booking;
    const [ownerWrite, claimWrite] = await Promise.allSettled([
      this.#store.recordOwner(result.uid, owner, group, 'booked'),
      claim ? this.#store.completeIdempotency(owner, claim.idempotencyKey, result) : undefined,
    ]);
    if (ownerWrite.status === 'fulfilled' && claimWrite.status === 'fulfilled') {
      // The store writes again: what waited is written now rather than at the next tick of the timer.
      if (this.#unrecorded.size > 0) void this.#retryUnrecorded();
      return;
    }
    const error = ownerWrite.status === 'rejected' ? ownerWrite.reason : (claimWrite as PromiseRejectedResult).reason;
    this.#keepUnrecorded(
      {
        booking,
        ownerWritten: ownerWrite.status === 'fulfilled',
        claimWritten: claimWrite.status === 'fulfilled',
        bytes: bookingBytes(booking),
      },
      error,
    );
  }

  /**
   * The booking of an idempotency key whose claim the store has not been able to complete yet, with the fingerprint it
   * was claimed for.
   */
  unrecordedClaim(owner: string, idempotencyKey: string): { result: BookingResult; fingerprint: string } | undefined {
    const waiting = this.#unrecordedClaims.get(claimId(owner, idempotencyKey));
    return waiting && { result: waiting.booking.result, fingerprint: waiting.booking.claim!.fingerprint };
  }

  /** Bookings waiting in memory for the store, and their bytes. */
  get unrecorded(): { bookings: number; bytes: number } {
    return { bookings: this.#unrecorded.size, bytes: this.#unrecordedBytes };
  }

  #keepUnrecorded(entry: Unrecorded, error: unknown): void {
    const { uid } = entry.booking.result;
    if (this.#unrecorded.has(uid)) return;
    if (this.#unrecordedBytes + entry.bytes > this.#unrecordedLimit) {
      this.#logger?.error(
        { err: error, uid },
        'could not record a booking the upstream made, and too many wait already: it was answered; its owner is learned again on a read, its idempotency claim resolved by its webhook',
      );
      return;
    }
    this.#logger?.error(
      { err: error, uid },
      'could not record a booking the upstream made: it was answered, and is recorded once the store writes again',
    );
    this.#unrecorded.set(uid, entry);
    const { claim, owner } = entry.booking;
    if (claim && !entry.claimWritten) this.#unrecordedClaims.set(claimId(owner, claim.idempotencyKey), entry);
    this.#unrecordedBytes += entry.bytes;
    this.#scheduleRetry();
  }

  #scheduleRetry(): void {
    if (this.#retryTimer || this.#unrecorded.size === 0) return;
    this.#retryTimer = setTimeout(() => {
      this.#retryTimer = undefined;
      void this.#retryUnrecorded();
    }, this.#retryMs).unref();
  }

  /** Writes every unrecorded booking again, owners in one write; one pass at a time. */
  #retryUnrecorded(): Promise<void> {
    this.#retrying ??= this.#writeUnrecorded().finally(() => {
      this.#retrying = undefined;
      this.#scheduleRetry();
    });
    return this.#retrying;
  }

  async #writeUnrecorded(): Promise<void> {
    const entries = [...this.#unrecorded.values()];
    if (entries.length === 0) return;
    const owners = entries.filter((entry) => !entry.ownerWritten);
    const ownersWrite =
      owners.length > 0
        ? this.#store.recordOwners(
            owners.map(({ booking }) => ({
              uid: booking.result.uid,
              owner: booking.owner,
              group: booking.group,
              proof: 'booked' as const,
            })),
          )
        : undefined;
    const claims = entries.filter((entry) => entry.booking.claim && !entry.claimWritten);
    const claimWrites = claims.map(({ booking }) =>
      this.#store.completeIdempotency(booking.owner, booking.claim!.idempotencyKey, booking.result),
    );
    const [ownersDone, ...claimsDone] = await Promise.allSettled([ownersWrite, ...claimWrites]);
    if (ownersDone!.status === 'fulfilled') for (const entry of owners) entry.ownerWritten = true;
    claimsDone.forEach((done, n) => {
      if (done.status !== 'fulfilled') return;
      const entry = claims[n]!;
      entry.claimWritten = true;
      this.#unrecordedClaims.delete(claimId(entry.booking.owner, entry.booking.claim!.idempotencyKey));
    });
    let recorded = 0;
    const now = Date.now();
    for (const entry of entries) {
      if (!entry.ownerWritten || (entry.booking.claim && !entry.claimWritten)) continue;
      const { result, owner, group } = entry.booking;
      this.#unrecorded.delete(result.uid);
      this.#unrecordedBytes -= entry.bytes;
      this.#remember(result.uid, { owner, group, proof: 'booked' }, now);
      recorded += 1;
    }
    if (recorded > 0)
      this.#logger?.info(
        { count: recorded, waiting: this.#unrecorded.size },
        'recorded bookings that had waited for the store',
      );
    // Back off while the store keeps refusing; at once back to the first delay when it writes.
    this.#retryMs =
      this.#unrecorded.size === 0 || recorded > 0 ? RECORD_RETRY_MS : Math.min(this.#retryMs * 2, RECORD_RETRY_MAX_MS);
  }

  /**
   * Writes what was learned and not yet written, and the bookings that wait for
   * the store (at stop: what still fails is logged, with its uids); resolves when
   * done (or failed, logged).
   */
  async flush(): Promise<void> {
    await this.#flushLearned();
    if (this.#unrecorded.size === 0) return;
    await this.#retryUnrecorded();
    // The store closes next: no timer is left to write to it (the next booking's write tries again).
    clearTimeout(this.#retryTimer);
    this.#retryTimer = undefined;
    if (this.#unrecorded.size > 0) {
      this.#logger?.error(
        { count: this.#unrecorded.size, uids: [...this.#unrecorded.keys()].slice(0, 1000) },
        'bookings the store could not record are still unrecorded: their owners are learned again on a read, their idempotency claims resolved by their webhooks',
      );
    }
  }

  async #flushLearned(): Promise<void> {
    while (this.#writing) await this.#writing;
    if (this.#pending.size === 0) return;
    const batch = [...this.#pending.values()];
    this.#pending = new Map();
    this.#writing = this.#store.recordOwners(batch).then(
      () => {
        this.counters.recorded += batch.length;
        if (this.#unrecorded.size > 0) void this.#retryUnrecorded();
        // Known from the store's side now; a record another instance wrote first is found on the next lookup's miss.
        const now = Date.now();
        // (One the store kept instead, by its rule, is found once this one expires from memory.)
        for (const entry of batch)
          this.#remember(entry.uid, { owner: entry.owner, group: entry.group, proof: entry.proof ?? 'read' }, now);
      },
      (error: unknown) => {
        this.counters.failed += batch.length;
        this.#logger?.warn(
          { err: error, count: batch.length },
          'could not record the owners of deliveries the upstream let a key read; they are asked again next time',
        );
      },
    );
    try {
      await this.#writing;
    } finally {
      this.#writing = undefined;
    }
  }

  /**
   * Learns the operator's claims made since this instance last asked (at most
   * once per CLAIM_CHECK_MS) and forgets what it remembered of their uids. Undefined
   * when nothing is due (no check to wait for); otherwise the check, which never fails
   * (a store that cannot answer is asked again next time).
   */
  noticeClaims(): Promise<void> | undefined {
    if (this.#claimsCheck) return this.#claimsCheck;
    const now = Date.now();
    if (now - this.#claimsCheckedAt < CLAIM_CHECK_MS) return undefined;
    this.#claimsCheckedAt = now;
    this.#claimsCheck = this.#checkClaims().finally(() => (this.#claimsCheck = undefined));
    return this.#claimsCheck;
  }

  /**
   * When this instance learned of an operator's claim of `uid` (ms since the epoch; 0 when none): an answer about it
   * cached before then is out of date.
   */
  claimedAt(uid: string): number {
    return Math.max(this.#claimed.get(uid) ?? 0, this.#allClaimedAt);
  }

  async #checkClaims(): Promise<void> {
    let answer;
    try {
      answer = await this.#store.ownerClaimsAfter(this.#claimsVersion);
    } catch (error) {
      if (!this.#claimsFailing)
        this.#logger?.warn(
          { err: error },
          "could not ask the store for the operator's claims; asked again on a later lookup",
        );
      this.#claimsFailing = true;
      return;
    }
    this.#claimsFailing = false;
    // The first answer is where this instance starts: it remembered nothing from before.
    const first = this.#claimsVersion === undefined;
    this.#claimsVersion = answer.version;
    if (first) return;
    const now = Date.now();
    if (answer.uids === undefined) {
      // More claims than the store keeps came since: anything remembered may be out of date.
      this.#allClaimedAt = now;
      this.#claimed.clear();
      for (const [uid, cached] of this.#cache) this.#forget(uid, cached);
      return;
    }
    for (const uid of answer.uids) {
      const cached = this.#cache.get(uid);
      if (cached) this.#forget(uid, cached);
      this.#claimed.delete(uid);
      this.#claimed.set(uid, now);
      if (this.#claimed.size > MAX_CLAIMED) this.#claimed.delete(this.#claimed.keys().next().value!);
    }
  }

  /** Records kept in memory and their estimated bytes, for /metrics. */
  get cached(): { entries: number; bytes: number } {
    return { entries: this.#cache.size, bytes: this.#bytes };
  }

  #known(uid: string, now: number): OwnerRecord | undefined {
    const booked = this.#unrecorded.get(uid);
    if (booked) return { owner: booked.booking.owner, group: booked.booking.group, proof: 'booked' };
    const pending = this.#pending.get(uid);
    if (pending) return { owner: pending.owner, group: pending.group, proof: pending.proof ?? 'read' };
    const cached = this.#cache.get(uid);
    if (!cached) return undefined;
    if (cached.expires <= now) {
      this.#forget(uid, cached);
      return undefined;
    }
    return cached.record;
  }

  #remember(uid: string, record: OwnerRecord, now: number): void {
    const old = this.#cache.get(uid);
    if (old) this.#forget(uid, old);
    const bytes = ENTRY_OVERHEAD_BYTES + uid.length * 2;
    if (bytes > this.#cacheBytes) return;
    while (this.#bytes + bytes > this.#cacheBytes) {
      // The oldest first (a Map keeps insertion order), through one iterator kept from eviction to eviction: a fresh
      // one starts at the table's front and steps over every entry deleted since its last compaction, which in a
      // full cache that keeps learning is tens of thousands of holes per eviction (about 80 µs of every first read).
      let oldest = this.#evictions.next();
      if (oldest.done) oldest = (this.#evictions = this.#cache.entries()).next();
      const [oldestUid, cached] = oldest.value!;
      this.#forget(oldestUid, cached);
    }
    // On a platform-scoped upstream a record learned from a read may be replaced by a proof anywhere.
    const replaceable = this.scope === 'platform' && !merchantScoped(record.proof);
    const expires = now + (replaceable ? REPLACEABLE_FOR_MS : CACHED_FOR_MS);
    this.#cache.set(uid, { record, bytes, expires, provedAt: now });
    this.#bytes += bytes;
  }

  #forget(uid: string, cached: Cached): void {
    this.#cache.delete(uid);
    this.#bytes -= cached.bytes;
  }
}

const claimId = (owner: string, idempotencyKey: string) => `${owner}:${idempotencyKey}`;

/** What an unrecorded booking holds: its strings (two bytes a character) and the entries around them. */
function bookingBytes({ result, owner, claim }: BookingRecord): number {
  const chars =
    result.uid.length +
    (result.trackingUrl?.length ?? 0) +
    owner.length +
    (claim ? claim.idempotencyKey.length * 2 + claim.fingerprint.length + owner.length : 0);
  return BOOKING_OVERHEAD_BYTES + chars * 2;
}

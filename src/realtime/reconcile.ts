// Reconciliation by polling. The upstream sends webhooks only when it was given
// a URL, and retries one at most five times: a subscriber could otherwise wait
// forever on an event that never comes. So each delivery a live subscriber of
// this instance follows is read from the upstream when no event has arrived for
// RECONCILE_INTERVAL_MS: once per delivery whatever its number of subscribers,
// with one of their keys, within RECONCILE_MAX_READS_PER_SECOND for the whole
// instance. A change the read shows is stored and published as the event the
// webhook would have carried (its payload marked `facade_source: "poll"`, with
// the log position the read was made at); a webhook of the same milestone
// arriving later is then a repeat, stored as stale. The read decides where the
// events cannot (src/domain/milestones.ts): an event that contradicts where the
// delivery stands has its delivery read at once, and a read newer than the
// state wins; a cancel or failure with no evidence of pickup ends the delivery
// only when a read made FINALITY_GRACE_MS after it was first seen still says so.
// Every read is merged into the delivery's view (src/domain/delivery-view.ts).
// A key the upstream refuses ends its subscriptions UNAUTHENTICATED.
// Deliveries nobody follows here are read too, so that no change is lost for
// good from deliveryEvents and Delivery.events: each unfinished delivery the
// facade knows, once per RECONCILE_UNFOLLOWED_INTERVAL_MS (src/realtime/sweeps.ts),
// with its owner's key as this process last saw it (src/realtime/owner-keys.ts),
// under a lease in the store so that instances sharing it do not all read it;
// and at once when an event contradicts its state, and when the grace of its
// cancel or failure ends, as for a followed one. The budget is shared fairly
// across merchants (src/realtime/fair-reads.ts).
import { DeliveryGraphError, NotFoundError, UnauthenticatedError } from '../errors.js';
import { hashKey } from '../domain/merchant-key.js';
import { POLL_SOURCE } from '../domain/milestones.js';
import type { AppendCondition, AppendResult, NotStored, StoredEvent } from '../store/store.js';
import type { Upstream } from '../upstream/clients.js';
import type { WireWebhookEvent } from '../upstream/wire.js';
import type { EventBus } from './bus.js';
import { fairPick } from './fair-reads.js';
import { UnfollowedReads, type Repair, type UnfollowedHost, type UnfollowedOptions } from './unfollowed-reads.js';
import {
  applyRead,
  graceEndOf,
  isRefusal,
  MAX_BACKOFF,
  READ_PRIORITY,
  readDelivery,
  type DeliveryRead,
  type ReadKind,
  type ReadOutcome,
} from './reads.js';

export { POLL_SOURCE };
export type { DeliveryRead, ReadKind, ReadOutcome } from './reads.js';

/** One subscription following a delivery. */
export interface Follower {
  key: string;
  /** Ends the subscription with this error (the key was refused). */
  end(error: Error): void;
}

/** The unfollowed reads' options (store, interval, grace, keys, passes), and: */
export interface ReconcilerOptions extends UnfollowedOptions {
  upstream: Upstream;
  /**
   * Stores an event made from a read in log order, only when the store finds its condition holds, and publishes it (the
   * webhook receiver's AppendBatcher).
   */
  append(payload: WireWebhookEvent, receivedAt: string, onlyIf: AppendCondition): Promise<AppendResult | NotStored>;
  /** Most reads per second for this instance. */
  maxReadsPerSecond: number;
  /**
   * Every event stored, from every instance: contradictions, cancels and failures of deliveries nobody follows here.
   */
  bus?: EventBus;
  /** Told of each read as it is made: its kind, and how long after it fell due (the queue's delay). */
  onRead?(kind: ReadKind, delayMs: number): void;
}

/** Read by /metrics. */
export interface ReconcileCounters {
  /** Reads made (each one or two upstream calls: platform, then partner). */
  reads: number;
  /** Events stored from reads: what webhooks had not brought. */
  changes: number;
  /** Reads that failed (upstream down, timing out, not found); they back off. */
  errors: number;
  /** Subscriptions ended because the upstream refused their key. */
  refused: number;
  /** Reads made, by why each was made. */
  byKind: Record<ReadKind, number>;
  /** Keys dropped from memory because the upstream refused them on an unfollowed read. */
  keysDropped: number;
  /** Reads due and not made at the last tick: what the budget holds back. */
  due: number;
}

interface Followed {
  uid: string;
  /** Whose turn its reads take: the owner its first follower's key stands for. */
  owner: string;
  /** Why its next read is due. */
  kind: Exclude<ReadKind, 'unfollowed'>;
  followers: Set<Follower>;
  /** Which group answered last time, so the other is not asked first. */
  group: 'platform' | 'partner' | undefined;
  /** When the next read is due (ms since the epoch). */
  dueAt: number;
  /** Failed reads in a row: each doubles the wait, up to MAX_BACKOFF. */
  failures: number;
  reading: boolean;
  /** An event contradicted the state while a read was under way (made before it): read again at once. */
  readAgain: boolean;
}

/** A read after failures waits never more than 10 minutes (and at most MAX_BACKOFF intervals). */
const MAX_BACKOFF_MS = 10 * 60_000;

export class Reconciler {
  readonly counters: ReconcileCounters = {
    reads: 0,
    changes: 0,
    errors: 0,
    refused: 0,
    byKind: { followed: 0, unfollowed: 0, contradiction: 0, confirmation: 0 },
    keysDropped: 0,
    due: 0,
  };
  readonly #options: ReconcilerOptions;
  readonly #followed = new Map<string, Followed>();
  /** Deliveries nobody follows here, loaded by a pass or due for a contradiction or confirmation. */
  readonly #unfollowed: UnfollowedReads;
  readonly #tickMs: number;
  readonly #unlisten: Array<() => void> = [];
  #timer: NodeJS.Timeout | undefined;
  #tokens = 0;
  #lastTick = Date.now();
  /** The owner served last: the next tick's turns start after it. */
  #lastOwner: string | undefined;

  constructor(options: ReconcilerOptions) {
    this.#options = options;
    // Ticks a tenth of the interval apart: a read is late by at most that.
    this.#tickMs = Math.min(1_000, Math.max(20, Math.floor(options.intervalMs / 10)));
    const { keys, bus } = options;
    const unfollowed = (this.#unfollowed = new UnfollowedReads(this.#host(), this.enabled));
    if (!this.enabled || !keys) return;
    // An owner with a key has a pass to make.
    if (unfollowed.sweeps) this.#unlisten.push(keys.onRemember(() => this.#start()));
    if (bus) this.#unlisten.push(bus.listen(undefined, (event) => unfollowed.heard(event), { internal: true }));
  }

  /** What the unfollowed reads use of this reconciler: its schedule, its budget, its reads and counters. */
  #host(): UnfollowedHost {
    return {
      options: this.#options,
      counters: this.counters,
      isFollowed: (uid) => this.#followed.has(uid),
      start: () => this.#start(),
      nextDue: (intervals) => this.#nextDue(intervals),
      counted: (kind, dueAt) => this.#counted(kind, dueAt),
      read: (key, uid, group) => this.#read(key, uid, group),
      applyRead: (uid, read, basis) => this.applyRead(uid, read, basis),
      refund: () => (this.#tokens = Math.min(this.#options.maxReadsPerSecond, this.#tokens + 1)),
    };
  }

  /** Unfinished deliveries found by the last pass of each owner whose key is in memory. */
  get unfinishedCount(): number {
    return this.#unfollowed.sweeps?.unfinished ?? 0;
  }

  /** Owners whose key is in memory (their deliveries can be read unfollowed). */
  get ownerKeyCount(): number {
    return this.#options.keys?.size ?? 0;
  }

  /** Deliveries followed by at least one live subscriber of this instance. */
  get followedCount(): number {
    return this.#followed.size;
  }

  get enabled(): boolean {
    return this.#options.intervalMs > 0;
  }

  /**
   * Reads the delivery with the key, as a subscription starts: the upstream's
   * word that the key is still valid, and a fresh state. A refused key rejects
   * UNAUTHENTICATED. Any other failure (upstream down, not found) resolves
   * undefined: the stored state stands and reconciliation reads again later.
   * The read is not stored here: a store behind it may only have webhooks on
   * their way, and a read stored first would make them stale. The caller hands
   * it to applyRead (atStart), which stores only what the read decides;
   * reconciliation stores what is still missing once no event has come for an interval.
   */
  async confirm(key: string, uid: string): Promise<DeliveryRead | undefined> {
    let read: DeliveryRead;
    try {
      read = await this.#read(key, uid, undefined);
    } catch (error) {
      if (isRefusal(error)) throw error;
      this.#options.logger?.debug(
        { err: error, uid },
        'reconcile: the read at subscription start failed; the stored state stands',
      );
      return undefined;
    }
    return read;
  }

  /**
   * The upstream's word on a key not bound to one delivery (deliveryEvents without
   * uids): the platform's availability, then the partner group's; refused only
   * when both refuse it. Other failures let it through.
   */
  async confirmKey(key: string): Promise<void> {
    const { upstream } = this.#options;
    let refusals = 0;
    for (const check of [() => upstream.platform.availability(key), () => upstream.partner.availability(key)]) {
      try {
        await check();
        return;
      } catch (error) {
        if (!isRefusal(error)) return;
        refusals += 1;
      }
    }
    if (refusals === 2) throw new UnauthenticatedError('The delivery service refused the merchant key.');
  }

  /** Follows the delivery for one subscription until the returned function is called. */
  follow(uid: string, follower: Follower): () => void {
    let followed = this.#followed.get(uid);
    if (!followed) {
      const owner = this.#options.keys?.ownerOf(follower.key) ?? hashKey(follower.key);
      followed = {
        uid,
        owner,
        kind: 'followed',
        followers: new Set(),
        group: undefined,
        dueAt: this.#nextDue(),
        failures: 0,
        reading: false,
        readAgain: false,
      };
      this.#followed.set(uid, followed);
    }
    followed.followers.add(follower);
    this.#start();
    const entry = followed;
    return () => {
      entry.followers.delete(follower);
      if (entry.followers.size === 0 && this.#followed.get(uid) === entry) this.#followed.delete(uid);
    };
  }

  /**
   * Any event of a followed delivery (a webhook, from any instance) puts its next
   * read off by an interval; one that contradicts the state has it read at once
   * (the read settles it), and a cancel or failure has it read when its grace ends.
   */
  heard(uid: string, event?: StoredEvent): void {
    const followed = this.#followed.get(uid);
    if (!followed) return;
    if (event?.contradicts) {
      if (followed.reading) followed.readAgain = true;
      else {
        followed.dueAt = Date.now();
        followed.kind = 'contradiction';
      }
      return;
    }
    if (followed.reading) return;
    followed.dueAt = this.#nextDue();
    followed.kind = 'followed';
    const graceEnds = event && graceEndOf(event, this.#options.finalityGraceMs);
    if (graceEnds !== undefined && graceEnds < followed.dueAt) {
      followed.dueAt = graceEnds;
      followed.kind = 'confirmation';
    }
  }

  stop(): void {
    clearInterval(this.#timer);
    this.#timer = undefined;
    for (const unlisten of this.#unlisten.splice(0)) unlisten();
    this.#followed.clear();
    this.#unfollowed.stop();
  }

  /** An interval from now, plus up to a fifth more so reads spread out instead of coming in waves. */
  #nextDue(intervals = 1): number {
    const ms = Math.min(this.#options.intervalMs * intervals, Math.max(MAX_BACKOFF_MS, this.#options.intervalMs));
    return Date.now() + ms * (1 + Math.random() * 0.2);
  }

  #start(): void {
    if (this.#timer || !this.enabled) return;
    this.#lastTick = Date.now();
    this.#timer = setInterval(() => this.#tick(), this.#tickMs);
    this.#timer.unref();
  }

  /** Nothing to read: no delivery followed or waiting, and no owner with a pass to make. */
  get #idle(): boolean {
    return (
      this.#followed.size === 0 && this.#unfollowed.size === 0 && !(this.#unfollowed.sweeps && this.ownerKeyCount > 0)
    );
  }

  /**
   * Loads what passes are due to read, then reads what is due, as far as the
   * rate allows (a token bucket of one second's reads): one owner's read at a
   * time in turn, each owner's most urgent and longest due first (fairPick).
   */
  #tick(): void {
    if (this.#idle) {
      clearInterval(this.#timer);
      this.#timer = undefined;
      return;
    }
    const now = Date.now();
    const rate = this.#options.maxReadsPerSecond;
    this.#tokens = Math.min(rate, this.#tokens + ((now - this.#lastTick) * rate) / 1000);
    this.#lastTick = now;
    this.#unfollowed.sweeps?.topUp(now);
    type Due = { owner: string; priority: number; lateness: number; followed?: Followed; repair?: Repair };
    const due: Due[] = [];
    // Lateness for the cadence of each kind; a contradiction's or confirmation's against the interval.
    const cadence = (kind: ReadKind) =>
      Math.max(1, kind === 'unfollowed' ? (this.#options.unfollowedIntervalMs ?? 0) : this.#options.intervalMs);
    for (const followed of this.#followed.values()) {
      if (followed.reading || followed.dueAt > now) continue;
      due.push({
        owner: followed.owner,
        priority: READ_PRIORITY[followed.kind],
        lateness: (now - followed.dueAt) / cadence(followed.kind),
        followed,
      });
    }
    for (const repair of this.#unfollowed.due(now)) {
      const lateness = (now - repair.dueAt) / cadence(repair.kind);
      due.push({ owner: repair.owner, priority: READ_PRIORITY[repair.kind], lateness, repair });
    }
    const { picked, last } = fairPick(due, Math.floor(this.#tokens), this.#lastOwner);
    this.#lastOwner = last;
    this.#tokens -= picked.length;
    this.counters.due = due.length - picked.length;
    const repairs: Repair[] = [];
    for (const read of picked) {
      if (read.followed) void this.#reconcile(read.followed);
      else repairs.push(read.repair!);
    }
    if (repairs.length > 0) void this.#unfollowed.readAll(repairs);
  }

  async #reconcile(followed: Followed): Promise<void> {
    const follower = followed.followers.values().next().value;
    if (!follower) return;
    followed.reading = true;
    followed.readAgain = false;
    this.#counted(followed.kind, followed.dueAt);
    try {
      // Taken before the read: a state no event moved since is older than what the read shows.
      const basis = await this.#options.store.lastSeq();
      const read = await this.#read(follower.key, followed.uid, followed.group);
      followed.group = read.group;
      followed.failures = 0;
      const { confirmAt } = await this.applyRead(followed.uid, read, basis);
      const next = this.#nextDue();
      if (followed.readAgain) {
        followed.dueAt = Date.now();
        followed.kind = 'contradiction';
      } else if (confirmAt !== undefined && confirmAt < next) {
        followed.dueAt = confirmAt;
        followed.kind = 'confirmation';
      } else {
        followed.dueAt = next;
        followed.kind = 'followed';
      }
    } catch (error) {
      if (isRefusal(error)) {
        this.#refuse(follower.key, error as Error);
        this.#options.keys?.forget(follower.key);
        // Another subscriber's key may read it at the next tick.
        followed.dueAt = Date.now();
      } else {
        this.counters.errors += 1;
        followed.failures += 1;
        followed.dueAt = this.#nextDue(Math.min(2 ** followed.failures, MAX_BACKOFF));
        // An answer the upstream gave (404, a timeout, a 5xx) is said in its code, without a stack; only a fault of
        // ours has one.
        if (error instanceof DeliveryGraphError) {
          const level = error instanceof NotFoundError ? 'info' : 'warn';
          this.#options.logger?.[level](
            { uid: followed.uid, failures: followed.failures, code: error.code, reason: error.message },
            'reconcile: reading a followed delivery failed; trying again later',
          );
        } else {
          this.#options.logger?.warn(
            { err: error, uid: followed.uid, failures: followed.failures },
            'reconcile: reading a followed delivery failed; trying again later',
          );
        }
      }
    } finally {
      followed.reading = false;
    }
  }

  /** Counts a read as it is made, by kind, and tells how long it waited past due. */
  #counted(kind: ReadKind, dueAt: number): void {
    this.counters.reads += 1;
    this.counters.byKind[kind] += 1;
    this.#options.onRead?.(kind, Math.max(0, Date.now() - dueAt));
  }

  /** Ends every subscription of this instance that follows a delivery with the refused key. */
  #refuse(key: string, error: Error): void {
    for (const followed of this.#followed.values()) {
      for (const follower of [...followed.followers]) {
        if (follower.key !== key) continue;
        this.counters.refused += 1;
        followed.followers.delete(follower);
        follower.end(error);
      }
      if (followed.followers.size === 0) this.#followed.delete(followed.uid);
    }
  }

  /**
   * Stores what a read (made when the log's last seq was `basis`) shows that the store does not have, and merges it into
   * the delivery's view (applyRead in src/realtime/reads.ts).
   */
  applyRead(
    uid: string,
    read: DeliveryRead,
    basis: number,
    options: { atStart?: boolean; readAt?: number } = {},
  ): Promise<ReadOutcome> {
    const { store, append, finalityGraceMs } = this.#options;
    const changed = () => void (this.counters.changes += 1);
    return applyRead({ store, append, finalityGraceMs, changed }, { uid, read, basis, ...options });
  }

  #read(key: string, uid: string, group: 'platform' | 'partner' | undefined): Promise<DeliveryRead> {
    return readDelivery(this.#options.upstream, key, uid, group);
  }
}

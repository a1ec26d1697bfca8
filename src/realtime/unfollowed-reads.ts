// Reads of deliveries nobody follows on this instance (src/realtime/reconcile.ts schedules them with the followed
// ones, in one budget): each unfinished delivery a pass finds (src/realtime/sweeps.ts), and one an event contradicts
// or whose cancel's grace ends, read with its owner's key under a lease in the store, so that instances sharing it do
// not all read it.
import { NotFoundError } from '../errors.js';
import { POLL_SOURCE } from '../domain/milestones.js';
import type { Logger } from '../logger.js';
import type { OwnerGroup, OwnerRecord, Store, StoredEvent, UnfinishedDelivery } from '../store/store.js';
import type { OwnerKeys } from './owner-keys.js';
import { graceEndOf, isRefusal, MAX_BACKOFF, type DeliveryRead, type ReadKind, type ReadOutcome } from './reads.js';
import { Sweeps } from './sweeps.js';

/** What unfollowed reads take from the reconciler's options. */
export interface UnfollowedOptions {
  store: Store;
  /** How long without an event before a followed delivery is read; 0: never. */
  intervalMs: number;
  /**
   * How long a cancel or failure with no evidence of pickup waits for later evidence before a read may confirm it
   * final.
   */
  finalityGraceMs: number;
  logger?: Logger;
  /**
   * How often each unfinished delivery nobody follows here is read (RECONCILE_UNFOLLOWED_INTERVAL_MS); 0 or absent:
   * never.
   */
  unfollowedIntervalMs?: number;
  /** Only deliveries whose owner record is this recent are read unfollowed (RECONCILE_UNFOLLOWED_WINDOW). */
  unfollowedWindowMs?: number;
  /** The owners' keys as this process last saw them: what unfollowed deliveries are read with. Without it none is. */
  keys?: OwnerKeys;
  /** The owner record of a delivery (src/access/owners.ts), for an event of one that is not loaded. */
  ownerOf?(uid: string): Promise<OwnerRecord | undefined>;
}

/** What unfollowed reads need of the reconciler that schedules them. */
export interface UnfollowedHost {
  readonly options: UnfollowedOptions;
  readonly counters: { errors: number; keysDropped: number };
  isFollowed(uid: string): boolean;
  /** Its ticks run (a read was loaded). */
  start(): void;
  nextDue(intervals?: number): number;
  counted(kind: ReadKind, dueAt: number): void;
  read(key: string, uid: string, group: 'platform' | 'partner' | undefined): Promise<DeliveryRead>;
  applyRead(uid: string, read: DeliveryRead, basis: number): Promise<ReadOutcome>;
  /** A read picked but made by another instance: its share of the budget goes back. */
  refund(): void;
}

/** A delivery nobody follows here, waiting for its read. */
export interface Repair {
  uid: string;
  owner: string;
  group: 'platform' | 'partner' | undefined;
  kind: Exclude<ReadKind, 'followed'>;
  dueAt: number;
  failures: number;
  reading: boolean;
  readAgain: boolean;
}

/**
 * Contradiction and confirmation reads of unfollowed deliveries waiting in memory, at most (passes find the others).
 */
const MAX_PENDING_REPAIRS = 100_000;
/** Deliveries whose last event time is kept (a pass skips one heard from within its interval), at most. */
const MAX_HEARD = 100_000;

const groupOf = (group: OwnerGroup | null): 'platform' | 'partner' | undefined =>
  group === 'PLATFORM' ? 'platform' : group === 'PARTNER' ? 'partner' : undefined;

export class UnfollowedReads {
  readonly #host: UnfollowedHost;
  readonly #options: UnfollowedOptions;
  /** Deliveries nobody follows here, loaded by a pass or due for a contradiction or confirmation. */
  readonly #repairs = new Map<string, Repair>();
  /** Unfollowed reads loaded and not yet made, by owner (what a pass waits on before its next page). */
  readonly #loaded = new Map<string, number>();
  /** When each delivery's last event was heard (ms since the epoch), oldest first. */
  readonly #heard = new Map<string, number>();
  /** The passes, when unfollowed deliveries are read on an interval. */
  readonly sweeps: Sweeps | undefined;

  constructor(host: UnfollowedHost, passes: boolean) {
    this.#host = host;
    const options = (this.#options = host.options);
    const keys = options.keys;
    if (!passes || !keys || !((options.unfollowedIntervalMs ?? 0) > 0)) return;
    this.sweeps = new Sweeps({
      store: options.store,
      keys,
      intervalMs: options.unfollowedIntervalMs!,
      windowMs: options.unfollowedWindowMs ?? Infinity,
      loaded: (owner) => this.#loaded.get(owner) ?? 0,
      found: (owner, deliveries) => this.#found(owner, deliveries),
      logger: options.logger,
    });
  }

  /** Deliveries waiting for a read. */
  get size(): number {
    return this.#repairs.size;
  }

  /** The waiting reads due by `now` (one followed since it was loaded is dropped: the follower's reads cover it). */
  due(now: number): Repair[] {
    const due: Repair[] = [];
    for (const repair of this.#repairs.values()) {
      if (this.#host.isFollowed(repair.uid)) this.#dropRepair(repair);
      else if (!repair.reading && repair.dueAt <= now) due.push(repair);
    }
    return due;
  }

  stop(): void {
    this.sweeps?.stop();
    this.#repairs.clear();
    this.#loaded.clear();
    this.#heard.clear();
  }

  /**
   * Reads deliveries nobody follows here, each with its owner's key: those whose
   * lease this instance takes (the others another instance reads); a lease per
   * delivery and kind, for as long as the next read of that kind should wait
   * (a contradiction's or confirmation's is given back once its read is done).
   * A lease this instance holds is its own to take again: a contradiction heard
   * while its read was under way is read again, never refused by that lease.
   */
  async readAll(repairs: Repair[]): Promise<void> {
    for (const repair of repairs) repair.reading = true;
    let taken: Set<string>;
    const leaseOf = (repair: Repair) => (repair.kind === 'unfollowed' ? repair.uid : `${repair.uid}:${repair.kind}`);
    try {
      // A pass's read holds its lease for most of the pass interval; a contradiction's or confirmation's, an interval.
      const unfollowed = repairs.filter((repair) => repair.kind === 'unfollowed').map(leaseOf);
      const urgent = repairs.filter((repair) => repair.kind !== 'unfollowed').map(leaseOf);
      const [a, b] = await Promise.all([
        this.#options.store.leaseReads(unfollowed, (this.#options.unfollowedIntervalMs ?? 0) * 0.9),
        this.#options.store.leaseReads(urgent, Math.max(1_000, this.#options.intervalMs)),
      ]);
      taken = new Set([...a, ...b]);
    } catch (error) {
      // The store cannot say who reads what: nobody reads now, every one tries again later.
      for (const repair of repairs) {
        repair.reading = false;
        repair.dueAt = this.#host.nextDue();
      }
      this.#options.logger?.warn(
        { err: error },
        'reconcile: could not take the leases of unfollowed reads; trying again later',
      );
      return;
    }
    for (const repair of repairs) {
      const lease = leaseOf(repair);
      if (taken.has(lease)) {
        // A contradiction's or confirmation's lease goes back once its read is done, so that an event contradicting the
        // delivery again is read again (here, or by whichever instance takes the lease then). A pass's holds for the
        // pass.
        const urgent = repair.kind !== 'unfollowed';
        void this.#repair(repair).finally(() => urgent && this.#release(lease));
        continue;
      }
      // Another instance reads it: done here, and the budget it was given goes back.
      repair.reading = false;
      this.#dropRepair(repair);
      this.#host.refund();
    }
  }

  #release(lease: string): void {
    // Not given back (the store is away): it expires within an interval, and this instance may take it again meanwhile.
    this.#options.store
      .releaseReads([lease])
      .catch((error: unknown) =>
        this.#options.logger?.debug({ err: error }, 'reconcile: could not give a read lease back; it expires'),
      );
  }

  async #repair(repair: Repair): Promise<void> {
    const key = this.#options.keys?.keyOf(repair.owner);
    if (!key || this.#host.isFollowed(repair.uid)) {
      repair.reading = false;
      this.#dropRepair(repair);
      return;
    }
    repair.readAgain = false;
    this.#host.counted(repair.kind, repair.dueAt);
    try {
      const basis = await this.#options.store.lastSeq();
      const read = await this.#host.read(key, repair.uid, repair.group);
      repair.failures = 0;
      const { confirmAt } = await this.#host.applyRead(repair.uid, read, basis);
      if (repair.readAgain) this.#reschedule(repair, 'contradiction', Date.now());
      else if (confirmAt !== undefined) this.#reschedule(repair, 'confirmation', confirmAt);
      else this.#dropRepair(repair);
    } catch (error) {
      if (isRefusal(error)) {
        // Not this owner's key any more: its deliveries wait until the merchant calls with one the upstream accepts.
        this.#options.keys?.forget(key);
        this.#host.counters.keysDropped += 1;
        this.#dropRepair(repair);
      } else if (error instanceof NotFoundError || repair.kind === 'unfollowed') {
        // The key cannot see it (any more), or the upstream failed a pass's read (whose lease holds until about the
        // next pass): the next pass asks again.
        this.#host.counters.errors += 1;
        this.#dropRepair(repair);
      } else {
        this.#host.counters.errors += 1;
        repair.failures += 1;
        repair.dueAt = this.#host.nextDue(Math.min(2 ** repair.failures, MAX_BACKOFF));
        this.#options.logger?.warn(
          { err: error, uid: repair.uid, failures: repair.failures },
          'reconcile: reading an unfollowed delivery failed; trying again later',
        );
      }
    } finally {
      repair.reading = false;
    }
  }

  /**
   * A page of a pass: each delivery not followed, not waiting already and not heard from within the pass interval is
   * read once.
   */
  #found(owner: string, deliveries: readonly UnfinishedDelivery[]): void {
    const now = Date.now();
    const recent = now - (this.#options.unfollowedIntervalMs ?? 0);
    for (const { uid, group } of deliveries) {
      if (this.#host.isFollowed(uid) || this.#repairs.has(uid) || (this.#heard.get(uid) ?? -Infinity) > recent)
        continue;
      this.#repairs.set(uid, {
        uid,
        owner,
        group: groupOf(group),
        kind: 'unfollowed',
        dueAt: now,
        failures: 0,
        reading: false,
        readAgain: false,
      });
      this.#loaded.set(owner, (this.#loaded.get(owner) ?? 0) + 1);
    }
    this.#host.start();
  }

  /** A repair becomes a read of another kind (no longer a pass's: the pass may load its next page). */
  #reschedule(repair: Repair, kind: Repair['kind'], dueAt: number): void {
    if (repair.kind === 'unfollowed' && kind !== 'unfollowed') this.#unload(repair.owner);
    repair.kind = kind;
    repair.dueAt = dueAt;
  }

  /**
   * A contradiction or a cancel heard for a delivery already waiting: a pass's
   * read becomes the read the event asks for (a webhook came, the pass's read is
   * not needed); a contradiction is read at once whatever waited; of two
   * confirmations, the earlier grace end.
   */
  #merge(repair: Repair, kind: 'contradiction' | 'confirmation', dueAt: number): void {
    if (repair.kind === 'unfollowed' || kind === 'contradiction') this.#reschedule(repair, kind, dueAt);
    else if (repair.kind === 'confirmation') repair.dueAt = Math.min(repair.dueAt, dueAt);
  }

  #dropRepair(repair: Repair): void {
    if (this.#repairs.get(repair.uid) !== repair) return;
    this.#repairs.delete(repair.uid);
    if (repair.kind === 'unfollowed') this.#unload(repair.owner);
  }

  #unload(owner: string): void {
    const left = (this.#loaded.get(owner) ?? 1) - 1;
    if (left > 0) this.#loaded.set(owner, left);
    else this.#loaded.delete(owner);
  }

  /**
   * Every event stored, by any instance. For a delivery nobody follows here: its
   * time is kept (a pass skips a delivery heard from lately); one that
   * contradicts its state has it read at once, and a cancel or failure has it
   * read when its grace ends, with its owner's key. A followed one is the
   * streams' to report (heard).
   */
  heard(event: StoredEvent): void {
    const { uid } = event;
    if (this.#host.isFollowed(uid)) return;
    const repair = this.#repairs.get(uid);
    const graceEnds = graceEndOf(event, this.#options.finalityGraceMs);
    // A webhook (not an event made from a read): its webhooks come, and the pass's read can wait for the next pass.
    if (event.payload.facade_source !== POLL_SOURCE) {
      this.#heard.delete(uid);
      this.#heard.set(uid, Date.now());
      if (this.#heard.size > MAX_HEARD) this.#heard.delete(this.#heard.keys().next().value!);
      if (!event.contradicts && graceEnds === undefined && repair?.kind === 'unfollowed' && !repair.reading)
        this.#dropRepair(repair);
    }
    if (!event.contradicts && graceEnds === undefined) return;
    const kind = event.contradicts ? 'contradiction' : 'confirmation';
    const dueAt = event.contradicts ? Date.now() : graceEnds!;
    if (repair) {
      if (repair.reading) repair.readAgain ||= event.contradicts === true;
      else this.#merge(repair, kind, dueAt);
      return;
    }
    const { keys, ownerOf } = this.#options;
    if (!keys || !ownerOf || keys.size === 0 || this.#repairs.size >= MAX_PENDING_REPAIRS) return;
    ownerOf(uid).then(
      (record) => {
        if (!record || keys.keyOf(record.owner) === undefined || this.#host.isFollowed(uid)) return;
        const waiting = this.#repairs.get(uid);
        if (waiting) {
          if (!waiting.reading) this.#merge(waiting, kind, dueAt);
          return;
        }
        this.#repairs.set(uid, {
          uid,
          owner: record.owner,
          group: groupOf(record.group),
          kind,
          dueAt,
          failures: 0,
          reading: false,
          readAgain: false,
        });
        this.#host.start();
      },
      (error: unknown) =>
        this.#options.logger?.warn(
          { err: error, uid },
          'reconcile: could not look up the owner of an unfollowed delivery; its next pass reads it',
        ),
    );
  }
}

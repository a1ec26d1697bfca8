// Who may see a delivery, decided here and nowhere else (docs/architecture.md,
// "Who may see a delivery"). The upstream's document scopes a read to the
// *platform* ("no delivery with this uid belongs to the platform"), so a 200 from
// it does not prove that the caller's merchant owns the delivery. The facade's
// owner records do:
// - a delivery with a record belongs to that key alone: every other key is told
//   "not found" by every read path, subscription, client token and cancel, and
//   the upstream is not asked;
// - a delivery with no record is the upstream's to decide, with the caller's key;
//   a key it lets read the delivery is recorded as the owner from then on (the
//   first record stays), with the endpoint group the delivery was found in.
import type { Logger } from '../logger.js';
import type { OwnerEntry, OwnerGroup, OwnerRecord, Store } from '../store/store.js';

/** What the record says of one caller: its own, another key's, or nothing known (the upstream decides). */
export type OwnerVerdict = 'own' | 'other' | 'unknown';

/** The rule, from the one fact it rests on: the record (or its absence) and the caller's key hash. */
export function ownerVerdict(record: OwnerRecord | undefined, callerHash: string): OwnerVerdict {
  if (!record) return 'unknown';
  return record.owner === callerHash ? 'own' : 'other';
}

/**
 * Records found in the store are kept in memory, bounded in bytes: a record never
 * changes once written (the first stays), so a kept one is true until it
 * expires with the retention; this bound is far below it. Absences are never
 * kept (another instance may write the record any moment).
 */
export const OWNER_CACHE_BYTES = 8 * 1024 * 1024;
const CACHED_FOR_MS = 10 * 60_000;
/**
 * Records learned from reads wait this long to be written together: at most
 * twenty commits (each an fsync on the embedded store) a second, however many
 * first reads arrive. A crash loses at most this much; those reads ask again.
 */
const LEARN_FLUSH_MS = 50;
/** A uid, the shared hash string's reference, the group and the Map entry: about this much. */
const ENTRY_OVERHEAD_BYTES = 160;

interface Cached {
  record: OwnerRecord;
  bytes: number;
  expires: number;
}

export interface OwnersOptions {
  logger?: Logger;
  cacheBytes?: number;
}

export class Owners {
  readonly #store: Store;
  readonly #logger: Logger | undefined;
  readonly #cacheBytes: number;
  readonly #cache = new Map<string, Cached>();
  #bytes = 0;
  /** Records learned from reads, written together every LEARN_FLUSH_MS (one commit for many). */
  #pending = new Map<string, OwnerEntry>();
  #writing: Promise<void> | undefined;
  #scheduled = false;
  /** Records written, and record writes that failed (the answer stood; a later read asks again): read by /metrics. */
  readonly counters = { recorded: 0, failed: 0 };

  constructor(store: Store, options: OwnersOptions = {}) {
    this.#store = store;
    this.#logger = options.logger;
    this.#cacheBytes = options.cacheBytes ?? OWNER_CACHE_BYTES;
  }

  /** The records of those uids that have one: from memory, the rest in one store read. */
  async lookup(uids: readonly string[]): Promise<Map<string, OwnerRecord>> {
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
      // A record learned meanwhile loses to the stored one: the first stays.
      this.#remember(uid, record, now);
      found.set(uid, record);
    }
    return found;
  }

  async lookupOne(uid: string): Promise<OwnerRecord | undefined> {
    return (await this.lookup([uid])).get(uid);
  }

  /**
   * A key the upstream let read `uid`, which has no record: it is the owner from
   * now on. Kept in memory at once, so this instance decides with it right away;
   * written to the store within LEARN_FLUSH_MS, with whatever else was learned by then.
   */
  learn(uid: string, owner: string, group: OwnerGroup): void {
    if (this.#known(uid, Date.now()) || this.#pending.has(uid)) return;
    this.#pending.set(uid, { uid, owner, group });
    if (this.#scheduled) return;
    this.#scheduled = true;
    setTimeout(() => {
      this.#scheduled = false;
      void this.flush();
    }, LEARN_FLUSH_MS).unref();
  }

  /** Writes what was learned and not yet written; resolves when it is (or failed, logged). */
  async flush(): Promise<void> {
    while (this.#writing) await this.#writing;
    if (this.#pending.size === 0) return;
    const batch = [...this.#pending.values()];
    this.#pending = new Map();
    this.#writing = this.#store.recordOwners(batch).then(
      () => {
        this.counters.recorded += batch.length;
        // Known from the store's side now; a record another instance wrote first is found on the next lookup's miss.
        const now = Date.now();
        for (const entry of batch) this.#remember(entry.uid, { owner: entry.owner, group: entry.group }, now);
      },
      (error: unknown) => {
        this.counters.failed += batch.length;
        this.#logger?.warn({ err: error, count: batch.length }, 'could not record the owners of deliveries the upstream let a key read; they are asked again next time');
      },
    );
    try {
      await this.#writing;
    } finally {
      this.#writing = undefined;
    }
  }

  /** Records kept in memory and their estimated bytes, for /metrics. */
  get cached(): { entries: number; bytes: number } {
    return { entries: this.#cache.size, bytes: this.#bytes };
  }

  #known(uid: string, now: number): OwnerRecord | undefined {
    const pending = this.#pending.get(uid);
    if (pending) return { owner: pending.owner, group: pending.group };
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
      // The oldest first (a Map keeps insertion order).
      const [oldestUid, oldest] = this.#cache.entries().next().value!;
      this.#forget(oldestUid, oldest);
    }
    this.#cache.set(uid, { record, bytes, expires: now + CACHED_FOR_MS });
    this.#bytes += bytes;
  }

  #forget(uid: string, cached: Cached): void {
    this.#cache.delete(uid);
    this.#bytes -= cached.bytes;
  }
}

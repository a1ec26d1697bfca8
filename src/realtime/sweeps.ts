// The passes over unfinished deliveries that reconciliation reads though nobody
// follows them (src/realtime/reconcile.ts). One pass per owner whose key is in
// memory (src/realtime/owner-keys.ts: an owner without one cannot be read, so
// its deliveries are not even loaded) every RECONCILE_UNFOLLOWED_INTERVAL_MS,
// paging through the store's unfinished deliveries of that owner
// (Store.unfinishedDeliveries) a few at a time: a page is loaded only once
// most of the owner's previous one was read, so memory holds at most a page per
// owner (and MAX_LOADED in all) however many deliveries there are, and each
// owner's pass goes as fast as its fair share of the read budget lets it.
import type { Logger } from '../logger.js';
import type { Store, UnfinishedDelivery } from '../store/store.js';
import type { OwnerKeys } from './owner-keys.js';

/** Unfollowed reads waiting in memory, all owners together, at most (about a megabyte). */
export const MAX_LOADED = 10_000;
/** One page of one owner, at most. */
const PAGE_MAX = 100;
/** Pages of one owner loaded in one turn (a tick of reconciliation), at most. */
const PAGES_PER_TURN = 20;

export interface SweepsOptions {
  store: Store;
  keys: OwnerKeys;
  /** How often each pass starts (from the start of the previous one, or at once when that took longer). */
  intervalMs: number;
  /** Only deliveries whose owner record is this recent. */
  windowMs: number;
  /** Reads loaded and not yet made, of this owner. */
  loaded(owner: string): number;
  /**
   * A page found these unfinished deliveries of the owner: each is read once (or skipped: followed, or heard from
   * lately).
   */
  found(owner: string, deliveries: readonly UnfinishedDelivery[]): void;
  logger?: Logger;
}

interface Sweep {
  /** Where the next page starts; undefined at the start of a pass. */
  cursor: string | undefined;
  /** A pass is under way (started at startedAt). */
  running: boolean;
  startedAt: number;
  /**
   * When the next page may be loaded: during a pass at once, unless a page failed; after it, when the next pass starts.
   */
  nextAt: number;
  paging: boolean;
  /** Unfinished deliveries found so far in this pass, and in the last whole pass. */
  found: number;
  lastFound: number | undefined;
}

export class Sweeps {
  readonly #options: SweepsOptions;
  readonly #sweeps = new Map<string, Sweep>();
  #stopped = false;

  constructor(options: SweepsOptions) {
    this.#options = options;
  }

  /**
   * Unfinished deliveries found in the last whole pass of each owner with a key (the current one where it found more).
   */
  get unfinished(): number {
    let total = 0;
    for (const sweep of this.#sweeps.values()) total += Math.max(sweep.lastFound ?? 0, sweep.found);
    return total;
  }

  /** Loads the next page of each owner whose pass is due and whose loaded reads run low. */
  topUp(now: number): void {
    const { keys, intervalMs, loaded } = this.#options;
    const owners = keys.owners();
    // Owners whose key was dropped or forgotten take nothing more.
    if (this.#sweeps.size > owners.length)
      for (const owner of this.#sweeps.keys()) if (keys.keyOf(owner) === undefined) this.#sweeps.delete(owner);
    const perOwner = Math.max(1, Math.min(PAGE_MAX, Math.floor(MAX_LOADED / Math.max(1, owners.length))));
    for (const owner of owners) {
      let sweep = this.#sweeps.get(owner);
      if (!sweep) {
        // The first pass an interval after the key came (a delivery just booked with it needs no read yet), spread as
        // the later ones are.
        sweep = {
          cursor: undefined,
          running: false,
          startedAt: now,
          nextAt: now + intervalMs * (1 + Math.random() * 0.1),
          paging: false,
          found: 0,
          lastFound: undefined,
        };
        this.#sweeps.set(owner, sweep);
      }
      if (sweep.paging || now < sweep.nextAt) continue;
      // Half a page still waiting: the owner's reads are behind its pass; load more once they catch up.
      if (loaded(owner) * 2 > perOwner) continue;
      if (!sweep.running) {
        sweep.running = true;
        sweep.startedAt = now;
        sweep.found = 0;
        sweep.cursor = undefined;
      }
      sweep.paging = true;
      void this.#page(owner, sweep, perOwner, now);
    }
  }

  /**
   * Loads pages of the owner's pass until half a page of reads is loaded, the
   * pass ends, or PAGES_PER_TURN pages were looked at (finished deliveries fill
   * pages too, and a store looks at a bounded number of records per page).
   */
  async #page(owner: string, sweep: Sweep, perOwner: number, now: number): Promise<void> {
    const { store, intervalMs, windowMs, loaded } = this.#options;
    try {
      for (let pages = 0; pages < PAGES_PER_TURN && loaded(owner) * 2 <= perOwner; pages += 1) {
        const page = await store.unfinishedDeliveries(owner, sweep.cursor, {
          limit: perOwner,
          since: Number.isFinite(windowMs) ? now - windowMs : 0,
        });
        if (this.#stopped || this.#sweeps.get(owner) !== sweep) return;
        sweep.found += page.deliveries.length;
        if (page.deliveries.length > 0) this.#options.found(owner, page.deliveries);
        sweep.cursor = page.next;
        if (page.next !== undefined) continue;
        // The pass is over: the next starts an interval after this one started (a tenth more at random, so owners
        // spread out).
        sweep.running = false;
        sweep.lastFound = sweep.found;
        sweep.nextAt = sweep.startedAt + intervalMs * (1 + Math.random() * 0.1);
        return;
      }
    } catch (error) {
      // The pass goes on from where it was, an interval later: the store may be back by then.
      sweep.nextAt = Date.now() + intervalMs;
      this.#options.logger?.warn(
        { err: error },
        'reconcile: could not page through unfinished deliveries; trying again later',
      );
    } finally {
      sweep.paging = false;
    }
  }

  stop(): void {
    this.#stopped = true;
    this.#sweeps.clear();
  }
}

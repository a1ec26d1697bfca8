// Who may see which delivery's events, by the one rule of src/access/owners.ts:
// a merchant may see a delivery recorded as its own at no upstream cost. A
// delivery recorded as another merchant's costs what an unknown one does when
// the client named it (src/access/probe.ts: nothing tells the two apart), and
// nothing when it merely passes an unfiltered deliveryEvents. A delivery with no
// record that decides is asked of the upstream: on a key-scoped upstream a read
// (platform, then partner) decides; on a platform-scoped one no read by uid
// proves anything, so only a partner order can be proven, by its reference read
// with the caller's key. A subscription pays for each such check from its allowance.
// Answers are cached per (merchant, uid); nothing is shared across merchants.
// An operator's claim of a uid, once this instance has learned it (Owners
// noticeClaims, within CLAIM_CHECK_MS), makes every answer cached about that uid
// before then out of date: it is asked again, and a stream that named the uid
// asks again before its next event (stillReadable).
import { fromPartnerOrder } from '../mapping/delivery.js';
import { NotFoundError } from '../errors.js';
import { type OwnerGroup, type Store } from '../store/store.js';
import { Owners, type OwnerVerdict } from '../access/owners.js';
import { ownedByReference, readAsCaller } from '../access/probe.js';
import type { Logger } from '../logger.js';
import type { Upstream } from '../upstream/clients.js';

/**
 * Answers from an owner record: a merchant-scoped proof is never replaced but by an operator; records expire with the
 * events.
 */
const RECORDED_TTL_MS = 30 * 60_000;
const ALLOWED_TTL_MS = 30 * 60_000;
const DENIED_TTL_MS = 15_000;
const MAX_ENTRIES = 100_000;
/** The window a subscription's SUBSCRIPTION_ACCESS_CHECKS are counted in. */
const CHECK_WINDOW_MS = 60_000;

/** Why an upstream check was not made (nothing was asked, and nothing is known), and in how many seconds one may be. */
export interface Withheld {
  /**
   * subscription: it spent its SUBSCRIPTION_ACCESS_CHECKS of this minute; rate_limit: the key's RATE_LIMIT_PER_MINUTE
   * is spent.
   */
  reason: 'subscription' | 'rate_limit';
  retryAfterSeconds: number;
}

/**
 * One merchant key's rate-limit budget (RequestLimits.perKey): 0 when a unit was taken, else seconds until one is
 * there.
 */
export interface KeyBudget {
  take(key: string): number | Promise<number>;
}

/** Access checks asked of the upstream and withheld, since start: read by /metrics. */
export interface AccessCounters {
  /** Upstream checks by what they found; `failed`: the upstream could not say (down, timing out, the key refused). */
  checks: { allowed: number; denied: number; failed: number };
  /**
   * Checks not made, by reason: the event was skipped undelivered (or, for a uid the client named, the subscription
   * refused).
   */
  withheld: { subscription: number; rate_limit: number };
}

export interface ReadAccessOptions {
  /** SUBSCRIPTION_ACCESS_CHECKS: upstream checks one subscription may make per minute for the events it meets. */
  checksPerSubscription?: number;
  logger?: Logger;
  /** The app's owner records; a private set on `store` when not given. */
  owners?: Owners;
}

/**
 * What one subscription may still spend on upstream checks: its own count per
 * minute (none for uids the client named: those are as many as it sent), and
 * one unit of the key's rate-limit budget each, as an operation would take.
 * The first check it withholds is logged.
 */
const secondsUntil = (at: number, now: number) => Math.max(1, Math.ceil((at - now) / 1000));

export class CheckAllowance {
  #windowStart = 0;
  #made = 0;
  /** While the key's budget is known to be spent: when a unit is back (ms since the epoch). */
  #budgetBackAt = 0;
  #logged = false;

  constructor(
    private readonly key: string,
    private readonly budget: KeyBudget | undefined,
    /** Checks per minute; Infinity: no count of its own. */
    readonly perMinute: number,
    private readonly onWithheld: (withheld: Withheld, first: boolean) => void,
    /**
     * Whether a check it pays for may make the key the delivery's owner: true for
     * uids the client named, false for the events an unfiltered deliveryEvents
     * meets (merely passing by must not claim another merchant's delivery).
     */
    readonly records = true,
  ) {}

  /** Takes one check; undefined when it may be made, else why not. */
  async take(): Promise<Withheld | undefined> {
    const now = Date.now();
    if (now - this.#windowStart >= CHECK_WINDOW_MS) {
      this.#windowStart = now;
      this.#made = 0;
    }
    if (this.#made >= this.perMinute)
      return this.#withhold({
        reason: 'subscription',
        retryAfterSeconds: secondsUntil(this.#windowStart + CHECK_WINDOW_MS, now),
      });
    if (this.budget) {
      if (now < this.#budgetBackAt)
        return this.#withhold({ reason: 'rate_limit', retryAfterSeconds: secondsUntil(this.#budgetBackAt, now) });
      const wait = await this.budget.take(this.key);
      if (wait > 0) {
        this.#budgetBackAt = Date.now() + wait * 1000;
        return this.#withhold({ reason: 'rate_limit', retryAfterSeconds: wait });
      }
    }
    this.#made += 1;
    return undefined;
  }

  #withhold(withheld: Withheld): Withheld {
    this.onWithheld(withheld, !this.#logged);
    this.#logged = true;
    return withheld;
  }
}

export class ReadAccess {
  readonly #owners: Owners;
  readonly #upstream: Upstream;
  readonly #checksPerSubscription: number;
  readonly #logger: Logger | undefined;
  /** Answers by `<merchant>:<uid>`: when each was cached, and until when it holds. */
  readonly #cache = new Map<string, { allowed: boolean; at: number; expires: number }>();
  readonly #pending = new Map<string, Promise<OwnerGroup | undefined>>();
  readonly counters: AccessCounters = {
    checks: { allowed: 0, denied: 0, failed: 0 },
    withheld: { subscription: 0, rate_limit: 0 },
  };

  constructor(store: Store, upstream: Upstream, options: ReadAccessOptions = {}) {
    this.#owners = options.owners ?? new Owners(store, { logger: options.logger });
    this.#upstream = upstream;
    this.#checksPerSubscription = options.checksPerSubscription ?? Infinity;
    this.#logger = options.logger;
  }

  /**
   * A new allowance for one subscription: `capped` for the checks of events it
   * meets (SUBSCRIPTION_ACCESS_CHECKS per minute), uncapped for the uids its
   * client named; both draw on `budget` when there is one.
   */
  allowance(key: string, budget: KeyBudget | undefined, capped: boolean): CheckAllowance {
    const perMinute = capped ? this.#checksPerSubscription : Infinity;
    return new CheckAllowance(
      key,
      budget,
      perMinute,
      (withheld, first) => {
        this.counters.withheld[withheld.reason] += 1;
        if (first) {
          this.#logger?.info(
            { reason: withheld.reason, checksPerMinute: Number.isFinite(perMinute) ? perMinute : undefined },
            withheld.reason === 'subscription'
              ? 'subscription: SUBSCRIPTION_ACCESS_CHECKS spent; events of deliveries with no owner record are skipped until the minute is over'
              : "subscription: the key's RATE_LIMIT_PER_MINUTE is spent; events of deliveries with no owner record are skipped until it is back",
          );
        }
      },
      !capped,
    );
  }

  /** The merchant id of a key (src/access/merchants.ts). */
  merchantOf(key: string): Promise<string> {
    return this.#owners.merchants.of(key);
  }

  /**
   * Whether the key may see the delivery's events. Cached answers, the caller's
   * own records, and another merchant's met in passing cost nothing; anything
   * else is asked of the upstream, after taking one check from `allowance` (when
   * given): if it has none left, nothing is asked and the answer is why.
   */
  canRead(key: string, uid: string): Promise<boolean>;
  canRead(key: string, uid: string, allowance: CheckAllowance | undefined): Promise<boolean | Withheld>;
  async canRead(key: string, uid: string, allowance?: CheckAllowance): Promise<boolean | Withheld> {
    const owner = await this.merchantOf(key);
    const entry = `${owner}:${uid}`;
    const claims = this.#owners.noticeClaims();
    if (claims) await claims;
    // An answer is as old as the records it was judged by: a claim learned while it is made makes it out of date too.
    const judgedAt = Date.now();
    const cached = this.#cache.get(entry);
    if (cached && cached.expires > judgedAt && cached.at > this.#owners.claimedAt(uid)) return cached.allowed;
    const { verdict } = await this.#owners.judgeOne(uid, owner);
    // An event passing an unfiltered deliveryEvents: no client picked its uid, so nothing is told by skipping it
    // unasked.
    const passing = allowance !== undefined && !allowance.records;
    if (verdict === 'own') {
      this.#put(entry, true, RECORDED_TTL_MS, judgedAt);
      return true;
    }
    // Not cached: a client naming the uid later must pay what an unknown uid does, not find a quick answer here.
    if (verdict === 'other' && passing) return false;
    let pending = this.#pending.get(entry);
    if (!pending) {
      const withheld = await allowance?.take();
      if (withheld) return withheld;
      // Another caller may have started the same check meanwhile: share it (the check taken is spent all the same).
      pending = this.#pending.get(entry);
    }
    if (!pending) {
      pending = this.#ask(key, owner, uid, verdict).finally(() => this.#pending.delete(entry));
      this.#pending.set(entry, pending);
    }
    const group = await pending;
    // On a key-scoped upstream, a merchant it lets read the delivery is recorded as its owner (no instance asks
    // again), unless the check was only for an event passing an unfiltered deliveryEvents; a partner order proven
    // by its reference was recorded by the check. The answer stands without the record: a store that cannot write
    // it only costs a later check.
    if (group && verdict === 'unknown' && this.#owners.scope === 'key' && !passing)
      this.#owners.learn(uid, owner, group, 'read');
    const allowed = group !== undefined;
    this.#put(entry, allowed, allowed ? ALLOWED_TTL_MS : DENIED_TTL_MS, judgedAt);
    return allowed;
  }

  /**
   * Whether a stream that named `uid` (checked at `since`, ms since the epoch)
   * may go on: yes at once unless an operator's claim of the uid was learned
   * since; then the key is checked again as a new subscription would be.
   */
  async stillReadable(key: string, uid: string, since: number): Promise<boolean> {
    return this.stillReadableNow(uid, since) ?? this.#stillReadable(key, uid, since);
  }

  /**
   * The same answered at once when it can be (no claim check is under way, and no claim of the uid was learned since):
   * true; undefined when stillReadable has to wait or ask.
   */
  stillReadableNow(uid: string, since: number): true | undefined {
    if (this.#owners.noticeClaims() !== undefined) return undefined;
    return this.#owners.claimedAt(uid) < since ? true : undefined;
  }

  async #stillReadable(key: string, uid: string, since: number): Promise<boolean> {
    const claims = this.#owners.noticeClaims();
    if (claims) await claims;
    if (this.#owners.claimedAt(uid) < since) return true;
    return this.canRead(key, uid);
  }

  /**
   * One upstream check, for a delivery no record decides for this merchant, counted by what it found: the group it was
   * found in.
   */
  async #ask(key: string, owner: string, uid: string, verdict: OwnerVerdict): Promise<OwnerGroup | undefined> {
    try {
      const group = await this.#readable(key, owner, uid, verdict);
      this.counters.checks[group ? 'allowed' : 'denied'] += 1;
      return group;
    } catch (error) {
      this.counters.checks.failed += 1;
      throw error;
    }
  }

  /**
   * The group in which the merchant may read the uid, undefined when in none.
   * Key scope: where the key's read succeeds, platform then partner. Platform
   * scope: a read by uid proves nothing, so only a partner order can be the
   * caller's, proven by its reference (and recorded); the platform group is not
   * asked. Another merchant's uid is read as an unknown one (src/access/probe.ts).
   */
  async #readable(key: string, owner: string, uid: string, verdict: OwnerVerdict): Promise<OwnerGroup | undefined> {
    const scope = this.#owners.scope;
    for (const group of scope === 'key' ? (['PLATFORM', 'PARTNER'] as const) : (['PARTNER'] as const)) {
      let delivery;
      try {
        delivery = await readAsCaller(this.#upstream, scope, verdict, key, uid, group);
      } catch (error) {
        // Not found in one group: try the other. Anything else is not an answer.
        if (!(error instanceof NotFoundError)) throw error;
        continue;
      }
      if (scope === 'key') return group;
      const byReference = async (reference: string) =>
        fromPartnerOrder(await this.#upstream.partner.getOrderByReference(key, reference));
      if (!(await ownedByReference(delivery, byReference))) return undefined;
      this.#owners.learn(uid, owner, group, 'reference');
      return group;
    }
    return undefined;
  }

  #put(entry: string, allowed: boolean, ttlMs: number, at: number): void {
    if (this.#cache.size >= MAX_ENTRIES) {
      // Drop the oldest entry (Map keeps insertion order).
      const oldest = this.#cache.keys().next().value;
      if (oldest !== undefined) this.#cache.delete(oldest);
    }
    this.#cache.delete(entry);
    this.#cache.set(entry, { allowed, at, expires: Date.now() + ttlMs });
  }
}

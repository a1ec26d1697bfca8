// Who may see which delivery's events: proven by src/access/prove.ts (a
// subscription's uid as a `check`, an event an unfiltered deliveryEvents meets as
// a `pass`). What is this caller's alone stays here: answers cached per
// (merchant, uid), nothing shared across merchants; concurrent checks of one
// claim shared; and what a subscription may spend on upstream checks (its
// allowance). An operator's claim of a uid, once this instance has learned it
// (Owners noticeClaims, within CLAIM_CHECK_MS), makes every answer cached about
// that uid before then out of date: it is asked again, and a stream that named
// the uid asks again before its next event (stillReadable).
import type { Store } from '../store/store.js';
import { Owners } from '../access/owners.js';
import { proveAccess, type AccessAnswer, type AccessClaim } from '../access/prove.js';
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
  /** Checks under way, by purpose, merchant and uid. */
  readonly #checks = new Map<string, Promise<AccessAnswer>>();
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
   * Whether the key may see the delivery's events, as src/access/prove.ts proves it. Cached answers, the caller's own
   * records, and another merchant's met in passing cost nothing; anything else is asked of the upstream, after taking
   * one check from `allowance` (when given): if it has none left, nothing is asked and the answer is why.
   */
  canRead(key: string, uid: string): Promise<boolean>;
  canRead(key: string, uid: string, allowance: CheckAllowance | undefined): Promise<boolean | Withheld>;
  async canRead(key: string, uid: string, allowance?: CheckAllowance): Promise<boolean | Withheld> {
    const merchant = await this.merchantOf(key);
    const entry = `${merchant}:${uid}`;
    const claims = this.#owners.noticeClaims();
    if (claims) await claims;
    // An answer is as old as the records it was judged by: a claim learned while it is made makes it out of date too.
    const judgedAt = Date.now();
    const cached = this.#cache.get(entry);
    if (cached && cached.expires > judgedAt && cached.at > this.#owners.claimedAt(uid)) return cached.allowed;
    // An event passing an unfiltered deliveryEvents: no client picked its uid.
    const purpose = allowance !== undefined && !allowance.records ? 'pass' : 'check';
    const claim = { key, merchant, uid, purpose } as const;
    // A check under way for the same claim is shared at no cost; one another's allowance withheld is no answer.
    let answer = await this.#checks.get(`${purpose}:${entry}`);
    let withheld: Withheld | undefined;
    if (!answer || (!answer.allowed && answer.withheld)) [answer, withheld] = await this.#check(claim, allowance);
    if (withheld) return withheld;
    // Refused unasked (another merchant's, met in passing) is not cached: a client naming the uid later must pay what
    // an unknown uid does, not find a quick answer here.
    if (answer.allowed || answer.upstreamRead) {
      const ttl = !answer.allowed ? DENIED_TTL_MS : answer.upstreamRead ? ALLOWED_TTL_MS : RECORDED_TTL_MS;
      this.#put(entry, answer.allowed, ttl, judgedAt);
    }
    return answer.allowed;
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
   * One claim proven, shared with concurrent askers of the same; an upstream check it makes is paid from `allowance`
   * and counted by what it found.
   */
  async #check(
    claim: AccessClaim,
    allowance: CheckAllowance | undefined,
  ): Promise<[AccessAnswer, Withheld | undefined]> {
    const shared = `${claim.purpose}:${claim.merchant}:${claim.uid}`;
    let withheld: Withheld | undefined;
    let asked = false;
    const mayAsk = async () => {
      withheld = await allowance?.take();
      asked = withheld === undefined;
      return asked;
    };
    const check = proveAccess(this.#owners, this.#upstream, claim, { mayAsk }).then(
      (answer) => {
        if (answer.upstreamRead) this.counters.checks[answer.allowed ? 'allowed' : 'denied'] += 1;
        return answer;
      },
      (error: unknown) => {
        // The upstream could not say (down, timing out, the key refused).
        if (asked) this.counters.checks.failed += 1;
        throw error;
      },
    );
    this.#checks.set(shared, check);
    try {
      return [await check, withheld];
    } finally {
      if (this.#checks.get(shared) === check) this.#checks.delete(shared);
    }
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

// What a request may cost before anything reaches the upstream:
// - RATE_LIMIT_PER_MINUTE operations per merchant key;
// - CLIENT_TOKEN_RATE_LIMIT_PER_MINUTE per client token, and
//   CLIENT_TOKEN_ADDRESS_RATE_LIMIT_PER_MINUTE for all tokens from one address:
//   a token's budgets are its own, so a forwarded tracking link can never spend
//   its merchant's;
// - AUTH_FAILURES_PER_MINUTE tries of keys the upstream has not accepted, per
//   client address, so rotating made-up keys cannot turn every request into
//   upstream calls; a key the upstream refused a moment ago is answered
//   UNAUTHENTICATED here, and one it accepted recently costs nothing of this;
// - for every caller without an accepted key (none, a refused one, one nobody
//   has judged yet, a client token that does not decrypt), the work its
//   operations cost this process, measured, per client address
//   (KEYLESS_WORK_MS_PER_MINUTE) and for all such callers together
//   (KEYLESS_TOTAL_WORK_MS_PER_MINUTE), and its refusals for needing a key
//   (KEYLESS_REFUSALS_PER_MINUTE). These are this process's own: its CPU is
//   what they protect, and they are asked before a body is read. A key nobody
//   has judged yet answers to its own address's budgets only, never to the
//   total, and is put to the upstream before any budget refuses it.
// In one process both are token buckets, refilled continuously, so a key may
// burst up to a minute's worth and then runs at the steady rate. With Redis
// (REDIS_URL) every instance draws on the same budgets: one fixed one-minute
// window per id in Redis (rate-limiter-flexible), one Redis round trip per
// operation (the two budgets of a key not yet accepted are asked together),
// and the in-process buckets while Redis does not answer.
// Ids are hashed: never a key itself, in memory or in Redis.
import { createHash } from 'node:crypto';
import { hashKey } from '../domain/merchant-key.js';
import type { Redis } from 'ioredis';
import { RateLimiterRedis, RateLimiterRes } from 'rate-limiter-flexible';
import type { Config } from '../config.js';
import { type DeliveryGraphError, RateLimitedError, UnauthenticatedError } from '../errors.js';
import { addressGroup } from '../observability/client-address.js';
import type { Logger } from '../logger.js';
import type { KnownKeys } from '../upstream/known-keys.js';
import type { Caller, Trust } from './caller.js';

/** Per minute for one id (a key, an address): 0 when one unit is taken, else whole seconds until one is there. */
export interface Budget {
  /** Units per minute; 0 disables the budget. */
  readonly perMinute: number;
  take(id: string): number | Promise<number>;
}

/** Full buckets idle this long are dropped, so abandoned keys cost no memory. */
const SWEEP_EVERY_MS = 60_000;

interface Bucket {
  tokens: number;
  /** When `tokens` was last brought up to date (ms, monotonic). */
  at: number;
}

/** A token bucket per id, in this process. */
export class KeyRateLimiter implements Budget {
  private readonly buckets = new Map<string, Bucket>();
  private readonly perMs: number;
  private lastSweep: number;

  /** The most a bucket holds: a burst. */
  private readonly capacity: number;

  constructor(
    /** Refill per minute, and bucket size unless `burst` says; 0 disables the limit. */
    readonly perMinute: number,
    private readonly now: () => number = () => performance.now(),
    /** Bucket size, when smaller than a minute's worth. */
    burst: number = perMinute,
  ) {
    this.perMs = perMinute / 60_000;
    // Never below one unit, which `take` and `wait` ask for.
    this.capacity = Math.max(Math.min(perMinute, burst), Math.min(perMinute, 1));
    this.lastSweep = now();
  }

  /** Whole seconds until this id has a token, without taking one (0: it has one now). */
  wait(key: string): number {
    if (this.perMinute === 0) return 0;
    const bucket = this.buckets.get(hashKey(key));
    if (!bucket) return 0;
    const tokens = Math.min(this.capacity, bucket.tokens + (this.now() - bucket.at) * this.perMs);
    return tokens >= 1 ? 0 : Math.max(1, Math.ceil((1 - tokens) / this.perMs / 1000));
  }

  /** Takes one token for this key: 0 when allowed, otherwise whole seconds until a token is there. */
  take(key: string): number {
    if (this.perMinute === 0) return 0;
    const now = this.now();
    if (now - this.lastSweep >= SWEEP_EVERY_MS) this.sweep(now);
    // Held only hashed (a merchant key is a secret); hashKey remembers the last keys' hashes.
    const id = hashKey(key);
    let bucket = this.buckets.get(id);
    if (!bucket) {
      bucket = { tokens: this.capacity, at: now };
      this.buckets.set(id, bucket);
    } else {
      bucket.tokens = Math.min(this.capacity, bucket.tokens + (now - bucket.at) * this.perMs);
      bucket.at = now;
    }
    if (bucket.tokens >= 1) {
      bucket.tokens -= 1;
      return 0;
    }
    return Math.max(1, Math.ceil((1 - bucket.tokens) / this.perMs / 1000));
  }

  /**
   * Takes `units` from this id's bucket once they are spent, however few are
   * left: the bucket may go below zero, and `wait` then counts the time until it
   * is back above one. For what is only known after it ran (the work of an operation).
   */
  charge(key: string, units: number): void {
    if (this.perMinute === 0 || !(units > 0)) return;
    const now = this.now();
    if (now - this.lastSweep >= SWEEP_EVERY_MS) this.sweep(now);
    const id = hashKey(key);
    const bucket = this.buckets.get(id);
    if (!bucket) {
      this.buckets.set(id, { tokens: this.capacity - units, at: now });
      return;
    }
    bucket.tokens = Math.min(this.capacity, bucket.tokens + (now - bucket.at) * this.perMs) - units;
    bucket.at = now;
  }

  /** Keys currently tracked (hashes only). */
  get size(): number {
    return this.buckets.size;
  }

  private sweep(now: number): void {
    this.lastSweep = now;
    for (const [id, bucket] of this.buckets) {
      if (bucket.tokens + (now - bucket.at) * this.perMs >= this.capacity) this.buckets.delete(id);
    }
  }
}

/**
 * A budget every instance on one Redis shares: RateLimiterRedis counts each id
 * in a one-minute window with one Lua call. An id over its budget is then
 * refused from memory until its window ends (no Redis call). While Redis does
 * not answer (not ready, or a command fails) this instance falls back to its
 * own buckets rather than refusing everyone or letting everyone through.
 */
export class SharedBudget implements Budget {
  readonly #shared: RateLimiterRedis;
  readonly #local: KeyRateLimiter;
  readonly #onFallback: ((error: unknown) => void) | undefined;
  #fallingBack = false;

  constructor(
    readonly perMinute: number,
    client: Redis,
    keyPrefix: string,
    onFallback?: (error: unknown) => void,
  ) {
    this.#shared = new RateLimiterRedis({
      storeClient: client,
      keyPrefix,
      points: perMinute,
      duration: 60,
      // Straight to the fallback while the connection is down, instead of waiting out ioredis's retries.
      rejectIfRedisNotReady: true,
      inMemoryBlockOnConsumed: perMinute + 1,
    });
    this.#local = new KeyRateLimiter(perMinute);
    this.#onFallback = onFallback;
  }

  take(id: string): number | Promise<number> {
    if (this.perMinute === 0) return 0;
    return this.#shared.consume(hashId(id)).then(
      () => {
        this.#fallingBack = false;
        return 0;
      },
      (error: unknown) => {
        if (error instanceof RateLimiterRes) {
          this.#fallingBack = false;
          return Math.max(1, Math.ceil(error.msBeforeNext / 1000));
        }
        if (!this.#fallingBack) this.#onFallback?.(error);
        this.#fallingBack = true;
        return this.#local.take(id);
      },
    );
  }
}

function hashId(id: string): string {
  return createHash('sha256').update(`delivery-graph:limit:${id}`).digest('base64url');
}

/** What the limits decided about one operation. */
export interface Admission {
  /** Why it may not run; sent as its only error, before any upstream call. */
  refusal?: DeliveryGraphError;
  /** To call once the operation is done: it was the first try of a new key, and others wait on it. */
  done?: () => void;
}

/** What the limits decided about a WebSocket's connection_init. */
export type ConnectionAdmission =
  | { verdict: 'accepted' }
  /** The upstream could not judge the key now: let in, each operation is still checked. */
  | { verdict: 'unanswered' }
  | { verdict: 'refused' }
  | { verdict: 'too-many-unknown-keys'; retryAfterSeconds: number };

const ADMITTED: Admission = {};

/** A caller without an accepted key: with a key nobody has judged yet (trying), or with none that works. */
type KeylessTrust = Exclude<Trust, 'earned'>;

export const UNKNOWN_KEYS_MESSAGE = 'Too many unknown merchant keys from this address; slow down.';

/** How long a key that took a try from an address is not charged to it again. */
const CHARGE_WINDOW_MS = 60_000;
/** Most (address, key) charges remembered; the oldest go first. */
const MAX_CHARGES = 100_000;

export class RequestLimits {
  /**
   * (address, key hash) → until when that key is already paid for at that address:
   * the budget counts distinct unknown keys, not requests, so a real key whose
   * operations never reach the upstream (and so never get it accepted) is not
   * refused for repeating itself. A key the upstream refused after it was paid
   * for pays again when it is put to the upstream again (its refusal is
   * remembered only KEY_REFUSAL_MEMORY_MS): each upstream try of a refused key
   * costs a try, so a few made-up keys repeated cannot outrun the budget.
   */
  readonly #charged = new Map<string, number>();

  constructor(
    /** What the upstream said about each key (the upstream clients learn it). */
    readonly keys: KnownKeys,
    /** RATE_LIMIT_PER_MINUTE, per merchant key. */
    readonly perKey: Budget,
    /** AUTH_FAILURES_PER_MINUTE, per client address (IPv6: per /64). */
    readonly perAddress: Budget,
    /** CLIENT_TOKEN_RATE_LIMIT_PER_MINUTE, per client token. */
    readonly perToken: Budget = new KeyRateLimiter(0),
    /** CLIENT_TOKEN_ADDRESS_RATE_LIMIT_PER_MINUTE, for the client tokens of one address (IPv6: per /64). */
    readonly perTokenAddress: Budget = new KeyRateLimiter(0),
    /**
     * KEYLESS_REFUSALS_PER_MINUTE, per client address, in this process (it is asked before a body is read, so it cannot
     * wait on Redis).
     */
    readonly keylessRefusals: KeyRateLimiter = new KeyRateLimiter(0),
    /** KEYLESS_WORK_MS_PER_MINUTE, per client address, in this process: the work it measures is this process's. */
    readonly keylessWork: KeyRateLimiter = new KeyRateLimiter(0),
    /** KEYLESS_TOTAL_WORK_MS_PER_MINUTE, for every caller without an accepted key together, in this process. */
    readonly keylessTotalWork: KeyRateLimiter = new KeyRateLimiter(0),
  ) {}

  /**
   * Whole seconds until this address may send a request without an accepted
   * credential again: 0 while it has refusals left in KEYLESS_REFUSALS_PER_MINUTE
   * and work left in KEYLESS_WORK_MS_PER_MINUTE, and all such callers together
   * in KEYLESS_TOTAL_WORK_MS_PER_MINUTE. Asked before anything of such a request
   * is read, and again before its operation runs. A key nobody has judged yet
   * (`trying`: a first request, after a restart or an idle spell) answers to its
   * own address's budgets alone: what other callers spent is not its doing.
   */
  keylessWait(address: string, trust: KeylessTrust = 'keyless'): number {
    const group = addressGroup(address);
    const own = Math.max(this.keylessRefusals.wait(`keyless\n${group}`), this.keylessWork.wait(`work\n${group}`));
    return trust === 'trying' ? own : Math.max(own, this.keylessTotalWork.wait(TOTAL_WORK));
  }

  /** One refusal of a request that needed a credential it did not have, charged to its address. */
  chargeKeylessRefusal(address: string): void {
    this.keylessRefusals.take(`keyless\n${addressGroup(address)}`);
  }

  /**
   * Work done for a caller without an accepted key, once it is done (work units:
   * see keylessWorkUnits), charged to its address and, unless it carried a key
   * nobody had judged yet, to the total of all such callers; past either budget,
   * its next requests wait (keylessWait).
   */
  chargeKeylessWork(address: string, units: number, trust: Trust = 'keyless'): void {
    this.keylessWork.charge(`work\n${addressGroup(address)}`, units);
    if (trust !== 'trying') this.keylessTotalWork.charge(TOTAL_WORK, units);
  }

  /**
   * Decides whether an operation runs. Without a credential it takes nothing
   * here (only what needs no key runs then, and its work is charged once done:
   * chargeKeylessWork). A client token takes one unit of its
   * own budget and one of its address's token budget, never its merchant's. A
   * key the upstream accepted recently takes one unit of its own budget. Any
   * other key also takes one try from its address; a refused one is then
   * answered UNAUTHENTICATED. Synchronous when no Redis is involved.
   */
  admit(caller: Caller, address: string): Admission | Promise<Admission> {
    if (caller.kind === 'client-token') return this.#token(caller.token.token, address);
    if (caller.kind !== 'merchant') return ADMITTED;
    const { key } = caller;
    const standing = this.keys.standing(key);
    if (standing === 'accepted') return this.#keyed(key);
    return this.#notAccepted(key, address, standing);
  }

  #token(token: string, address: string): Admission | Promise<Admission> {
    const own = this.perToken.take(`token\n${token}`);
    const shared = this.perTokenAddress.take(`token-address\n${addressGroup(address)}`);
    if (typeof own === 'number' && typeof shared === 'number')
      return keyedAdmission(Math.max(own, shared), CLIENT_TOKEN_LIMITED);
    return Promise.all([own, shared]).then(([a, b]) => keyedAdmission(Math.max(a, b), CLIENT_TOKEN_LIMITED));
  }

  /**
   * Decides whether a WebSocket may open with this key (or an HTTP body larger
   * than a keyless one may be read for it). An accepted key passes;
   * any other takes one try from the address, and a key nobody has judged is
   * put to the upstream by `ask` (whose answers the upstream clients learn).
   */
  async admitConnection(key: string, address: string, ask: () => Promise<void>): Promise<ConnectionAdmission> {
    let standing = this.keys.standing(key);
    if (standing === 'accepted') return { verdict: 'accepted' };
    let done: (() => void) | undefined;
    if (standing === 'unknown') {
      const turn = this.keys.firstTry(key);
      if (typeof turn === 'function') done = turn;
      else {
        await turn;
        standing = this.keys.standing(key);
        if (standing === 'accepted') return { verdict: 'accepted' };
      }
    }
    try {
      const wait = await this.#chargeAddress(address, key, standing === 'unknown');
      if (wait > 0) return { verdict: 'too-many-unknown-keys', retryAfterSeconds: wait };
      if (standing === 'unknown') {
        await ask();
        standing = this.keys.standing(key);
      }
      return { verdict: standing === 'unknown' ? 'unanswered' : standing };
    } finally {
      done?.();
    }
  }

  /**
   * A key other than the caller's own tried on its behalf (linkMerchantKey's
   * previousKey): free once the upstream has accepted it, else one try of the
   * address's AUTH_FAILURES_PER_MINUTE, as the same key sent as a credential
   * would cost. 0 when allowed, else seconds until a try is there.
   */
  chargeKeyTry(key: string, address: string): number | Promise<number> {
    return this.keys.standing(key) === 'accepted' ? 0 : this.#chargeAddress(address, key, true);
  }

  /**
   * One try from the address for this key, unless the key was already paid for
   * there within the window and (when `asking`: the key goes to the upstream)
   * has not been refused since.
   */
  #chargeAddress(address: string, key: string, asking: boolean): number | Promise<number> {
    const group = addressGroup(address);
    const id = `${group}\n${hashKey(key)}`;
    const now = Date.now();
    const until = this.#charged.get(id);
    if (until !== undefined && until > now && !(asking && this.keys.refusedAt(key) >= until - CHARGE_WINDOW_MS))
      return 0;
    const wait = this.perAddress.take(group);
    const remember = (seconds: number) => {
      if (seconds > 0) return seconds;
      this.#charged.delete(id);
      this.#charged.set(id, now + CHARGE_WINDOW_MS);
      if (this.#charged.size > MAX_CHARGES) this.#charged.delete(this.#charged.keys().next().value!);
      return 0;
    };
    return typeof wait === 'number' ? remember(wait) : wait.then(remember);
  }

  #keyed(key: string): Admission | Promise<Admission> {
    const wait = this.perKey.take(key);
    return typeof wait === 'number' ? keyedAdmission(wait) : wait.then(keyedAdmission);
  }

  async #notAccepted(key: string, address: string, standing: 'refused' | 'unknown'): Promise<Admission> {
    let done: (() => void) | undefined;
    if (standing === 'unknown') {
      const turn = this.keys.firstTry(key);
      if (typeof turn === 'function') done = turn;
      else {
        // Another request is trying this key right now: its answer decides for this one too.
        await turn;
        const now = this.keys.standing(key);
        if (now === 'accepted') return this.#keyed(key);
        standing = now;
      }
    }
    // Both budgets at once: one Redis round trip.
    const [addressWait, keyWait] = await Promise.all([
      this.#chargeAddress(address, key, standing === 'unknown'),
      standing === 'unknown' ? this.perKey.take(key) : 0,
    ]);
    let refusal: DeliveryGraphError | undefined;
    if (addressWait > 0) refusal = new RateLimitedError(addressWait, UNKNOWN_KEYS_MESSAGE);
    else if (standing === 'refused')
      refusal = new UnauthenticatedError('The delivery service refused the merchant key.');
    else if (keyWait > 0) refusal = new RateLimitedError(keyWait);
    if (refusal) {
      done?.();
      return { refusal };
    }
    return done ? { done } : ADMITTED;
  }
}

/**
 * A work budget: a bucket of a tenth of a minute's worth, so a flood that
 * starts gets its work spread over the minute at the budget's rate instead of
 * a minute's worth in one burst that holds the process for as long.
 */
export function workBudget(perMinute: number, now?: () => number): KeyRateLimiter {
  return new KeyRateLimiter(perMinute, now, perMinute / WORK_BURST_DIVISOR);
}

/** A work budget's bucket holds 1/10 of its minute: 6 s of refill. */
const WORK_BURST_DIVISOR = 10;

/** The one id of KEYLESS_TOTAL_WORK_MS_PER_MINUTE's bucket. */
const TOTAL_WORK = 'keyless work of every address';

/**
 * Bytes read or answered that count as one unit (a millisecond) of work: about
 * what parsing, serializing and writing that many bytes of JSON takes here,
 * which the timed part of an operation does not see.
 */
export const KEYLESS_BYTES_PER_WORK_MS = 64 * 1024;

/** Work units of an operation: the milliseconds it held the event loop, and its bytes read and answered. */
export function keylessWorkUnits(ms: number, bytes: number): number {
  return ms + bytes / KEYLESS_BYTES_PER_WORK_MS;
}

export const KEYLESS_LIMITED =
  'Too much asked without an accepted merchant key or client token from this address (too many refusals, or too much work: KEYLESS_WORK_MS_PER_MINUTE); send one, or wait retryAfterSeconds.';

export const CLIENT_TOKEN_LIMITED =
  "Too many requests for this client token; slow down (its budget is its own, not the merchant key's).";

function keyedAdmission(wait: number, message?: string): Admission {
  return wait === 0 ? ADMITTED : { refusal: new RateLimitedError(wait, message) };
}

/**
 * The limits of one app: in process, or shared through the store's Redis
 * connection (keys under its prefix) when there is one.
 */
export function createRequestLimits(
  config: Pick<Config, 'authFailuresPerMinute'> &
    Partial<Pick<Config, 'keylessRefusalsPerMinute' | 'keylessWorkMsPerMinute' | 'keylessTotalWorkMsPerMinute'>> & {
      graphql: Pick<Config['graphql'], 'rateLimitPerMinute'> &
        Partial<Pick<Config['graphql'], 'clientTokenRateLimitPerMinute' | 'clientTokenAddressRateLimitPerMinute'>>;
    },
  keys: KnownKeys,
  redis?: { client: Redis; prefix: string },
  logger?: Logger,
): RequestLimits {
  const budget = (perMinute: number, name: string): Budget =>
    redis && perMinute > 0
      ? new SharedBudget(perMinute, redis.client, `${redis.prefix}limit:${name}`, (error) =>
          logger?.warn(
            { budget: name, err: error instanceof Error ? error.message : String(error) },
            'redis did not answer a rate limit: this instance limits on its own until it does',
          ),
        )
      : new KeyRateLimiter(perMinute);
  return new RequestLimits(
    keys,
    budget(config.graphql.rateLimitPerMinute, 'key'),
    budget(config.authFailuresPerMinute, 'address'),
    budget(config.graphql.clientTokenRateLimitPerMinute ?? 0, 'token'),
    budget(config.graphql.clientTokenAddressRateLimitPerMinute ?? 0, 'token-address'),
    new KeyRateLimiter(config.keylessRefusalsPerMinute ?? 0),
    workBudget(config.keylessWorkMsPerMinute ?? 0),
    workBudget(config.keylessTotalWorkMsPerMinute ?? 0),
  );
}

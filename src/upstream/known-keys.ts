// What the upstream last said about each merchant key, learned from the answers
// to the calls made with it: refused (401 or invalid_api_key) or accepted (any
// other answer that shows the key was judged). Verdicts are kept per endpoint
// group, because a key may be valid for one group only (a platform key for
// another platform still opens the partner group, whose tokens the upstream may
// issue apart). A refusal does not undo a recent acceptance: a key that worked
// a moment ago keeps reaching the upstream, so a burst of wrong 401s from it
// (or a key revoked mid-use) is never stretched into a lockout here. A refusal
// is remembered only briefly (KEY_REFUSAL_MEMORY_MS, 5 s): long enough that a
// burst with a refused key costs one upstream call, short enough that a key the
// upstream accepts again (a transient 401, a key restored) is served again within
// seconds. Keys are held only as hashKey() hashes, in a bounded LRU whose verdicts expire.
import { hashKey } from '../domain/merchant-key.js';

export type KeyGroup = 'platform' | 'partner';

/**
 * accepted: some group accepted the key recently. refused: every group refused
 * it recently and none accepted it. unknown: anything else (never tried,
 * expired, or refused by one group and not yet tried on the other).
 */
export type KeyStanding = 'accepted' | 'refused' | 'unknown';

export interface KnownKeysOptions {
  /** How long an accepted key needs no new proof. */
  acceptedTtlMs?: number;
  /** How long a refused key is refused without asking the upstream (KEY_REFUSAL_MEMORY_MS). */
  refusedTtlMs?: number;
  /** Most keys remembered; the least recently judged go first. */
  maxKeys?: number;
  /** Longest a request waits for the verdict on another request's first try of the same key. */
  maxWaitMs?: number;
  now?: () => number;
}

interface Verdict {
  /** Until when the group's acceptance holds (0: none). */
  acceptedUntil: number;
  /** Until when the group's refusal holds (0: none, or an acceptance came after it). */
  refusedUntil: number;
  /** When the group last accepted the key (0: never, as far as remembered). */
  acceptedAt: number;
  /** When the group last refused the key (0: never, as far as remembered). */
  refusedAt: number;
}

type Verdicts = Partial<Record<KeyGroup, Verdict>>;

interface FirstTry {
  settled: Promise<void>;
  settle(): void;
}

const GROUPS: readonly KeyGroup[] = ['platform', 'partner'];

/** KEY_REFUSAL_MEMORY_MS's default: a few seconds, so one wrong 401 is no lockout. */
export const DEFAULT_REFUSAL_MEMORY_MS = 5_000;

export class KnownKeys {
  readonly #verdicts = new Map<string, Verdicts>();
  readonly #tries = new Map<string, FirstTry>();
  readonly #acceptedTtlMs: number;
  readonly #refusedTtlMs: number;
  readonly #maxKeys: number;
  readonly #maxWaitMs: number;
  /** An acceptance is written again only once this much of its time to live has passed. */
  readonly #relearnAfterMs: number;
  readonly #now: () => number;
  readonly #watchers = new Set<(key: string, standing: KeyStanding) => void>();

  constructor(options: KnownKeysOptions = {}) {
    this.#acceptedTtlMs = options.acceptedTtlMs ?? 10 * 60_000;
    this.#refusedTtlMs = options.refusedTtlMs ?? DEFAULT_REFUSAL_MEMORY_MS;
    this.#maxKeys = options.maxKeys ?? 50_000;
    this.#maxWaitMs = options.maxWaitMs ?? 10_000;
    this.#now = options.now ?? Date.now;
    this.#relearnAfterMs = Math.min(1000, this.#acceptedTtlMs / 10);
  }

  /** Where the key stands with the upstream, from what it last said. */
  standing(key: string): KeyStanding {
    const verdicts = this.#verdicts.get(hashKey(key));
    return verdicts ? standingOf(verdicts, this.#now()) : 'unknown';
  }

  /**
   * Whether this group refused the key recently and has not accepted it recently: a call would only be refused again.
   */
  refusedBy(key: string, group: KeyGroup): boolean {
    const verdict = this.#verdicts.get(hashKey(key))?.[group];
    if (!verdict) return false;
    const now = this.#now();
    return verdict.refusedUntil > now && verdict.acceptedUntil <= now;
  }

  /** Records what a group said about the key. */
  learn(key: string, group: KeyGroup, accepted: boolean): void {
    const hash = hashKey(key);
    const verdicts = this.#verdicts.get(hash) ?? {};
    const now = this.#now();
    const verdict = (verdicts[group] ??= { acceptedUntil: 0, refusedUntil: 0, acceptedAt: 0, refusedAt: 0 });
    // Accepted again right after the last time (every read says so): nothing to change but its moment and a moment of
    // its time to live.
    if (
      accepted &&
      verdict.refusedUntil === 0 &&
      verdict.acceptedUntil - now > this.#acceptedTtlMs - this.#relearnAfterMs
    ) {
      verdict.acceptedAt = now;
      return;
    }
    if (accepted) {
      verdict.acceptedUntil = now + this.#acceptedTtlMs;
      verdict.acceptedAt = now;
      verdict.refusedUntil = 0;
    } else {
      verdict.refusedUntil = now + this.#refusedTtlMs;
      verdict.refusedAt = now;
    }
    // Re-inserted, so the Map's order is least recently judged first.
    this.#verdicts.delete(hash);
    this.#verdicts.set(hash, verdicts);
    if (this.#verdicts.size > this.#maxKeys) {
      const oldest = this.#verdicts.keys().next().value;
      if (oldest !== undefined) this.#verdicts.delete(oldest);
    }
    // Requests waiting on this key's first try go on once the key is decided (one group's refusal may not be enough).
    const standing = standingOf(verdicts, now);
    if (standing !== 'unknown') this.#tries.get(hash)?.settle();
    for (const watcher of this.#watchers) watcher(key, standing);
  }

  /**
   * Called with the key and where it stands after each verdict that changed
   * something (not after each of a burst of acceptances): reconciliation's
   * memory of keys (src/realtime/owner-keys.ts).
   */
  watch(watcher: (key: string, standing: KeyStanding) => void): () => void {
    this.#watchers.add(watcher);
    return () => this.#watchers.delete(watcher);
  }

  /**
   * When the upstream last accepted the key, in any group, provided no group
   * refused it since (then undefined, as for a key never accepted or forgotten):
   * the proof that the key was valid then, which subscriptions re-confirm
   * (access/key-watch.ts).
   */
  acceptedAt(key: string): number | undefined {
    const verdicts = this.#verdicts.get(hashKey(key));
    if (!verdicts) return undefined;
    let accepted = 0;
    let refused = 0;
    for (const group of GROUPS) {
      const verdict = verdicts[group];
      if (!verdict) continue;
      accepted = Math.max(accepted, verdict.acceptedAt);
      refused = Math.max(refused, verdict.refusedAt);
    }
    return accepted > 0 && accepted >= refused ? accepted : undefined;
  }

  /** When any group last refused the key (0: never, as far as remembered). */
  refusedAt(key: string): number {
    const verdicts = this.#verdicts.get(hashKey(key));
    return Math.max(verdicts?.platform?.refusedAt ?? 0, verdicts?.partner?.refusedAt ?? 0);
  }

  /**
   * The first try of a key the upstream has not judged: the function that ends
   * it (once the request is done), or, when another request is already trying
   * the same key, a promise that settles when that one learns a verdict or ends.
   * So a burst with one new key costs one try, not one per request.
   */
  firstTry(key: string): (() => void) | Promise<void> {
    const hash = hashKey(key);
    const running = this.#tries.get(hash);
    if (running) return running.settled;
    let settle!: () => void;
    const settled = new Promise<void>((resolve) => (settle = resolve));
    // However the first request ends (or hangs), the others wait no longer than a call may take.
    const timer = setTimeout(() => entry.settle(), this.#maxWaitMs);
    timer.unref();
    const entry: FirstTry = {
      settled,
      settle: () => {
        clearTimeout(timer);
        if (this.#tries.get(hash) === entry) this.#tries.delete(hash);
        settle();
      },
    };
    this.#tries.set(hash, entry);
    return entry.settle;
  }

  /** Keys remembered (hashes only). */
  get size(): number {
    return this.#verdicts.size;
  }
}

function standingOf(verdicts: Verdicts, now: number): KeyStanding {
  let refused = 0;
  for (const group of GROUPS) {
    const verdict = verdicts[group];
    if (!verdict) continue;
    if (verdict.acceptedUntil > now) return 'accepted';
    if (verdict.refusedUntil > now) refused += 1;
  }
  return refused === GROUPS.length ? 'refused' : 'unknown';
}

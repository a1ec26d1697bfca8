// Revocation ends streams. A subscription's key is judged as it starts, but a
// stream may stay open for hours, and webhooks (which postpone reconciliation's
// reads) or an unfiltered deliveryEvents (which reads nothing) would keep it
// fed long after the upstream stopped accepting the key. So every open
// subscription of this process, whatever its field and transport (the pipeline
// holds each one here: pipeline/guards/key-refusal.ts), is held by its key (a
// client token's: the merchant key it carries), and each key is re-confirmed
// with the upstream at least once per KEY_RECONFIRM_INTERVAL_MS:
// - one availability call per key per interval, whatever its number of
//   subscriptions: the group that accepted it last (platform at first), and the
//   other only when that one refuses it (a key may be valid for one group only);
// - none when another call already proved the key within the interval (the
//   upstream clients learn every answer: Upstream.keys);
// - both groups refusing it ends every subscription of the key, UNAUTHENTICATED;
// - an upstream that cannot answer (down, timing out, circuit open) ends
//   nothing: the key is asked again an interval later.
// A key is held in memory only while a subscription of it is open, filed under
// its hash; it is never logged. Per process: with several instances, each
// confirms the keys of its own subscribers.
import { UnauthenticatedError } from '../errors.js';
import { hashKey } from '../domain/merchant-key.js';
import type { Logger } from '../logger.js';
import type { Upstream } from '../upstream/clients.js';
import type { KeyGroup } from '../upstream/known-keys.js';

export interface KeyWatchOptions {
  upstream: Pick<Upstream, 'platform' | 'partner' | 'keys'>;
  /** KEY_RECONFIRM_INTERVAL_MS: the longest a key goes without a proof while a subscription of it is open. */
  intervalMs: number;
  logger?: Logger;
  now?: () => number;
}

/** Read by /metrics. */
export interface KeyWatchCounters {
  /**
   * Confirmations asked of the upstream, by what it said: accepted, refused (by both groups), failed (it could not
   * say).
   */
  readonly confirmations: { accepted: number; refused: number; failed: number };
  /** Confirmations not asked: another call had proved the key within the interval. */
  proven: number;
  /** Subscriptions ended because the upstream refused their key. */
  ended: number;
}

interface Holder {
  end(): void;
}

interface Watched {
  key: string;
  holders: Set<Holder>;
  /** When the key is next due for a proof (ms since the epoch). */
  dueAt: number;
  /** When this watch last had the key accepted (0: not yet). */
  confirmedAt: number;
  confirming: boolean;
  /** The group asked first: the one that accepted the key last. */
  first: KeyGroup;
}

type Verdict = 'accepted' | 'refused' | 'failed';

const isRefusal = (error: unknown) => (error as { code?: unknown } | undefined)?.code === 'UNAUTHENTICATED';

export class KeyWatch {
  readonly counters: KeyWatchCounters = { confirmations: { accepted: 0, refused: 0, failed: 0 }, proven: 0, ended: 0 };
  readonly #watched = new Map<string, Watched>();
  readonly #options: KeyWatchOptions;
  readonly #now: () => number;
  /**
   * A tick late by at most this, a hundredth of the interval (10 to 250 ms): a key
   * is due this much before its interval is over, so no proof is ever older than
   * the interval, and a key costs at most one call per 99 % of it.
   */
  readonly #tickMs: number;
  #timer: NodeJS.Timeout | undefined;
  #stopping = new AbortController();

  constructor(options: KeyWatchOptions) {
    this.#options = options;
    this.#now = options.now ?? Date.now;
    this.#tickMs = Math.min(250, Math.max(10, Math.floor(options.intervalMs / 100)));
  }

  /** Keys with at least one open subscription in this process. */
  get keys(): number {
    return this.#watched.size;
  }

  /**
   * Holds one subscription of the key until the returned function is called;
   * `end` is called (once) if the upstream refuses the key meanwhile, after
   * which the hold is gone. The subscription just confirmed the key as it
   * started, so the first confirmation is due an interval from now.
   */
  hold(key: string, end: () => void): () => void {
    const id = hashKey(key);
    let watched = this.#watched.get(id);
    if (!watched) {
      watched = {
        key,
        holders: new Set(),
        dueAt: this.#dueAfter(this.#now()),
        confirmedAt: 0,
        confirming: false,
        first: 'platform',
      };
      this.#watched.set(id, watched);
    }
    const holder: Holder = { end };
    watched.holders.add(holder);
    this.#start();
    const entry = watched;
    return () => {
      entry.holders.delete(holder);
      if (entry.holders.size === 0 && this.#watched.get(id) === entry) this.#watched.delete(id);
    };
  }

  stop(): void {
    clearInterval(this.#timer);
    this.#timer = undefined;
    this.#stopping.abort();
    this.#stopping = new AbortController();
    this.#watched.clear();
  }

  /** The moment a proof made at `at` must be renewed by: the tick that sees it due is at most #tickMs late. */
  #dueAfter(at: number): number {
    return at + this.#options.intervalMs - this.#tickMs;
  }

  #start(): void {
    if (this.#timer) return;
    this.#timer = setInterval(() => this.#tick(), this.#tickMs);
    this.#timer.unref();
  }

  #tick(): void {
    if (this.#watched.size === 0) {
      clearInterval(this.#timer);
      this.#timer = undefined;
      return;
    }
    const now = this.#now();
    for (const watched of this.#watched.values()) {
      if (watched.confirming || watched.dueAt > now) continue;
      // Any call with the key that the upstream accepted since the last proof is a proof, unless a refusal came after
      // it.
      const accepted = this.#options.upstream.keys.acceptedAt(watched.key);
      if (accepted !== undefined) {
        const proof = Math.max(accepted, watched.confirmedAt);
        if (this.#dueAfter(proof) > now) {
          this.counters.proven += 1;
          watched.dueAt = this.#dueAfter(proof);
          continue;
        }
      }
      void this.#confirm(watched);
    }
  }

  async #confirm(watched: Watched): Promise<void> {
    watched.confirming = true;
    let verdict: Verdict;
    try {
      verdict = await this.#ask(watched);
    } finally {
      watched.confirming = false;
    }
    this.counters.confirmations[verdict] += 1;
    const now = this.#now();
    if (verdict === 'refused') {
      this.#end(watched);
      return;
    }
    if (verdict === 'accepted') watched.confirmedAt = now;
    watched.dueAt = this.#dueAfter(now);
  }

  /** One availability call, or two when the first group refuses the key: refused only when both do. */
  async #ask(watched: Watched): Promise<Verdict> {
    const { upstream } = this.#options;
    const signal = this.#stopping.signal;
    const groups: KeyGroup[] = watched.first === 'platform' ? ['platform', 'partner'] : ['partner', 'platform'];
    for (const group of groups) {
      try {
        await (group === 'platform'
          ? upstream.platform.availability(watched.key, { signal })
          : upstream.partner.availability(watched.key, { signal }));
        watched.first = group;
        return 'accepted';
      } catch (error) {
        // The upstream could not say (down, slow, its circuit open): no verdict, and no second call.
        if (!isRefusal(error)) {
          this.#options.logger?.debug(
            { err: error, group },
            'key watch: the upstream could not confirm a key; its subscriptions go on',
          );
          return 'failed';
        }
      }
    }
    return 'refused';
  }

  /** Ends every subscription of the refused key held here. */
  #end(watched: Watched): void {
    const id = hashKey(watched.key);
    if (this.#watched.get(id) === watched) this.#watched.delete(id);
    const holders = [...watched.holders];
    watched.holders.clear();
    this.counters.ended += holders.length;
    if (holders.length > 0)
      this.#options.logger?.info(
        { subscriptions: holders.length },
        'key watch: the upstream refused a key; its subscriptions ended UNAUTHENTICATED',
      );
    for (const holder of holders) holder.end();
  }
}

/** What an ended subscription's last message says: the key, or the key behind a client token, is no longer accepted. */
export function keyRefusedError(clientToken: boolean): UnauthenticatedError {
  return new UnauthenticatedError(
    clientToken
      ? 'The delivery service no longer accepts the merchant key behind this client token; ask the merchant for a new one.'
      : 'The delivery service refused the merchant key.',
  );
}

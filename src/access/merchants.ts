// Who a merchant is, behind the keys it holds. The upstream's key "identifies
// the merchant", but a merchant rotates its key: a merchant id, not a key, owns
// deliveries, idempotency keys, booking markers and cursors. A key hash with no
// link is its own merchant id, so everything recorded before merchants (keyed
// by the key's hash) is still its merchant's, unrewritten. A link from a key
// hash to a merchant id is made only with proof of a key the merchant already
// holds (graphql/merchant-keys.ts: both keys accepted by the upstream; or an
// operator, scripts/merchant.ts) and is kept whatever the retention.
// Links form a forest: a merchant id is the root its links lead to. A root with
// history (owner records, idempotency claims, ids linked to it) is never linked
// elsewhere: idempotency claims, cursors, reconciliation's sets of unfinished
// deliveries and contexts that hold a merchant id go by the exact id, so a
// merchant whose id changed would lose them. A link hangs the root without
// history under the other, whichever key made the call (the new key, in a
// rotation); two roots with history are one merchant only by an operator's
// deliberate merge (Store.mergeMerchant), which moves what they own.
// Only the key itself stays keyed by its hash: rate limits and what the
// upstream said about it (src/upstream/known-keys.ts).
import { hashKey } from '../domain/merchant-key.js';
import type { MerchantLink, MerchantMerge, Store } from '../store/store.js';

/**
 * How long this instance trusts what it read of a link: a link made or removed
 * on another instance (or by the operator command) counts here within this.
 * The instance that links forgets at once.
 */
export const MERCHANT_CACHE_MS = 5_000;
/** Ids whose root is kept; the oldest go first. */
const MAX_CACHED = 100_000;
/** Links followed at most (a chain grows one step per link whose root changed since; links point at roots). */
const MAX_DEPTH = 16;

export class Merchants {
  readonly #store: Store;
  readonly #cacheMs: number;
  readonly #roots = new Map<string, { root: string; expires: number }>();

  constructor(store: Store, options: { cacheMs?: number } = {}) {
    this.#store = store;
    this.#cacheMs = options.cacheMs ?? MERCHANT_CACHE_MS;
  }

  /** The merchant id of the merchant holding `key`. */
  of(key: string): Promise<string> {
    return this.rootOf(hashKey(key));
  }

  /** The merchant id a key hash or an (older) merchant id stands for now. */
  async rootOf(id: string): Promise<string> {
    return (await this.roots([id])).get(id)!;
  }

  /** rootOf for many ids: one store read per step of the longest chain. */
  async roots(ids: readonly string[]): Promise<Map<string, string>> {
    const now = Date.now();
    const found = new Map<string, string>();
    const missing = new Set<string>();
    for (const id of ids) {
      const cached = this.#roots.get(id);
      if (cached && cached.expires > now) found.set(id, cached.root);
      else missing.add(id);
    }
    if (missing.size === 0) return found;
    const resolved = await this.#follow([...missing]);
    for (const [id, root] of resolved) {
      found.set(id, root);
      this.#remember(id, root, now);
    }
    return found;
  }

  /**
   * Makes the keys hashed `newHash` and `oldHash` one merchant's, without moving
   * what either owns: the merchant without history becomes the other's (the new
   * key's, in a rotation); `refused` when both have history (Store.linkMerchant).
   * The caller has checked the proof (both keys accepted by the upstream, or an
   * operator's word).
   */
  async link(newHash: string, oldHash: string): Promise<MerchantLink> {
    const outcome = await this.#store.linkMerchant(newHash, oldHash);
    if (outcome.outcome === 'linked') this.#roots.clear();
    return outcome;
  }

  /** An operator's merge of two merchants that both have history (Store.mergeMerchant). */
  async merge(fromHash: string, intoHash: string): Promise<MerchantMerge> {
    const outcome = await this.#store.mergeMerchant(fromHash, intoHash);
    this.#roots.clear();
    return outcome;
  }

  /** Removes the link of a key hash (an operator undoing a link): true when it had one. */
  async unlink(id: string): Promise<boolean> {
    const removed = await this.#store.unlinkMerchant(id);
    this.#roots.clear();
    return removed;
  }

  /** The store's links followed for each id, to the end or MAX_DEPTH steps. */
  async #follow(ids: readonly string[]): Promise<Map<string, string>> {
    const roots = new Map(ids.map((id) => [id, id]));
    let open = [...new Set(ids)];
    for (let step = 0; step < MAX_DEPTH && open.length > 0; step += 1) {
      const links = await this.#store.merchantLinks(open);
      const next = new Set<string>();
      for (const [id, root] of roots) {
        const link = links.get(root);
        if (link === undefined) continue;
        roots.set(id, link);
        next.add(link);
      }
      open = [...next];
    }
    return roots;
  }

  #remember(id: string, root: string, now: number): void {
    this.#roots.delete(id);
    if (this.#roots.size >= MAX_CACHED) this.#roots.delete(this.#roots.keys().next().value!);
    this.#roots.set(id, { root, expires: now + this.#cacheMs });
  }
}

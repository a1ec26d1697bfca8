// Who may see which delivery's events. The facade's owner records decide first,
// with no upstream call: a key may see a delivery recorded as its own (booked
// through the facade with it), and never one recorded as another key's. Only a
// delivery with no record at all is asked of the upstream (platform read, then
// partner). Answers are cached per (key hash, uid); nothing is shared across keys.
import { NotFoundError } from '../errors.js';
import { type Store } from '../store/store.js';
import { hashKey } from '../domain/merchant-key.js';
import type { Upstream } from '../upstream/clients.js';

/** Answers from an owner record: records are only ever added (the first one wins) or expire with the events. */
const RECORDED_TTL_MS = 30 * 60_000;
const ALLOWED_TTL_MS = 30 * 60_000;
const DENIED_TTL_MS = 15_000;
const MAX_ENTRIES = 100_000;

/**
 * The rule owner records make, in one place: true when the record is the
 * caller's, false when it is another key's, undefined when there is none (only
 * then may the upstream be asked).
 */
export function recordedAccess(recordedOwner: string | undefined, callerHash: string): boolean | undefined {
  if (recordedOwner === undefined) return undefined;
  return recordedOwner === callerHash;
}

export class ReadAccess {
  readonly #store: Store;
  readonly #upstream: Upstream;
  readonly #cache = new Map<string, { allowed: boolean; expires: number }>();
  readonly #pending = new Map<string, Promise<boolean>>();

  constructor(store: Store, upstream: Upstream) {
    this.#store = store;
    this.#upstream = upstream;
  }

  async canRead(key: string, uid: string): Promise<boolean> {
    const owner = hashKey(key);
    const entry = `${owner}:${uid}`;
    const cached = this.#cache.get(entry);
    if (cached && cached.expires > Date.now()) return cached.allowed;
    const recorded = recordedAccess(await this.#store.ownerOf(uid), owner);
    if (recorded !== undefined) {
      this.#put(entry, recorded, RECORDED_TTL_MS);
      return recorded;
    }
    let pending = this.#pending.get(entry);
    if (!pending) {
      pending = this.#ask(key, uid).finally(() => this.#pending.delete(entry));
      this.#pending.set(entry, pending);
    }
    const allowed = await pending;
    this.#put(entry, allowed, allowed ? ALLOWED_TTL_MS : DENIED_TTL_MS);
    return allowed;
  }

  /** One upstream check, for a delivery with no owner record. */
  async #ask(key: string, uid: string): Promise<boolean> {
    for (const read of [() => this.#upstream.platform.get(key, uid), () => this.#upstream.partner.getOrder(key, uid)]) {
      try {
        await read();
        return true;
      } catch (error) {
        // Not found in one group: try the other. Anything else is not an answer.
        if (!(error instanceof NotFoundError)) throw error;
      }
    }
    return false;
  }

  #put(entry: string, allowed: boolean, ttlMs: number): void {
    if (this.#cache.size >= MAX_ENTRIES) {
      // Drop the oldest entry (Map keeps insertion order).
      const oldest = this.#cache.keys().next().value;
      if (oldest !== undefined) this.#cache.delete(oldest);
    }
    this.#cache.delete(entry);
    this.#cache.set(entry, { allowed, expires: Date.now() + ttlMs });
  }
}

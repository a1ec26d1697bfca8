// Who may see which delivery's events: a key may, when the delivery was booked
// through the facade with it, or when an upstream read with it succeeded. Answers
// are cached per (key hash, uid); nothing is shared across keys.
import { NotFoundError } from '../errors.js';
import { type Store } from '../store/store.js';
import { hashKey } from '../domain/merchant-key.js';
import type { Upstream } from '../upstream/clients.js';

const ALLOWED_TTL_MS = 30 * 60_000;
const DENIED_TTL_MS = 15_000;
const MAX_ENTRIES = 100_000;

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
    let pending = this.#pending.get(entry);
    if (!pending) {
      pending = this.#check(key, owner, uid).finally(() => this.#pending.delete(entry));
      this.#pending.set(entry, pending);
    }
    const allowed = await pending;
    this.#put(entry, allowed);
    return allowed;
  }

  async #check(key: string, owner: string, uid: string): Promise<boolean> {
    if ((await this.#store.ownerOf(uid)) === owner) return true;
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

  #put(entry: string, allowed: boolean): void {
    if (this.#cache.size >= MAX_ENTRIES) {
      // Drop the oldest entry (Map keeps insertion order).
      const oldest = this.#cache.keys().next().value;
      if (oldest !== undefined) this.#cache.delete(oldest);
    }
    this.#cache.delete(entry);
    this.#cache.set(entry, { allowed, expires: Date.now() + (allowed ? ALLOWED_TTL_MS : DENIED_TTL_MS) });
  }
}

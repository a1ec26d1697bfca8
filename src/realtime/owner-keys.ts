// The merchant keys that unfollowed deliveries are read with. The facade keeps
// only hashes of merchant keys (owner records, idempotency, limits), so a
// delivery nobody follows can be read only with a key this process has seen:
// the most recent key the upstream accepted for each owner, as owner records
// name owners (ownerOf: today the key's hash; whatever Owners calls an owner).
// Kept in this process's memory for as long as it lives, and nowhere else:
// never written to the store, a log, a metric or an error. Bounded: the owner
// heard from least recently goes first. A key the upstream refuses is dropped.
// After a restart the memory is empty, and an owner's unfinished deliveries wait
// until the merchant calls again (docs/subscriptions.md, "When nobody follows a delivery").
import { inspect } from 'node:util';
import { hashKey } from '../domain/merchant-key.js';

/** Owners whose key is kept at most; past it the one heard from least recently is forgotten. */
export const OWNER_KEYS_MAX = 10_000;

export interface OwnerKeysOptions {
  /** The owner a key stands for, as owner records name it (default: the key's hash). */
  ownerOf?: (key: string) => string;
  max?: number;
}

export class OwnerKeys {
  /** Owner → its most recent key; a Map keeps insertion order, so the first is the least recently heard. */
  readonly #keys = new Map<string, string>();
  readonly #max: number;
  readonly #listeners = new Set<(owner: string) => void>();
  readonly ownerOf: (key: string) => string;

  constructor(options: OwnerKeysOptions = {}) {
    this.ownerOf = options.ownerOf ?? hashKey;
    this.#max = options.max ?? OWNER_KEYS_MAX;
  }

  /** The upstream accepted this key: the owner's key from now on. */
  remember(key: string): void {
    const owner = this.ownerOf(key);
    const known = this.#keys.get(owner);
    this.#keys.delete(owner);
    this.#keys.set(owner, key);
    if (known !== undefined) return;
    if (this.#keys.size > this.#max) this.#keys.delete(this.#keys.keys().next().value!);
    for (const listener of this.#listeners) listener(owner);
  }

  /** The upstream refused this key: forgotten, unless the owner has another key by now. */
  forget(key: string): void {
    const owner = this.ownerOf(key);
    if (this.#keys.get(owner) === key) this.#keys.delete(owner);
  }

  keyOf(owner: string): string | undefined {
    return this.#keys.get(owner);
  }

  /** The owners with a key, least recently heard first (a copy). */
  owners(): string[] {
    return [...this.#keys.keys()];
  }

  get size(): number {
    return this.#keys.size;
  }

  /** Called with each owner that gains a key. */
  onRemember(listener: (owner: string) => void): () => void {
    this.#listeners.add(listener);
    return () => this.#listeners.delete(listener);
  }

  /** Never the keys, whoever prints or serialises this. */
  toJSON(): { owners: number } {
    return { owners: this.size };
  }

  [inspect.custom](): string {
    return `OwnerKeys { owners: ${this.size} }`;
  }
}

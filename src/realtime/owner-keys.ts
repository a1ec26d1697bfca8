// The merchant keys that unfollowed deliveries are read with. The facade keeps
// only hashes of merchant keys (owner records, idempotency, limits), so a
// delivery nobody follows can be read only with a key this process has seen:
// the most recent key the upstream accepted for each owner, as owner records
// name owners: the merchant a key belongs to (src/access/merchants.ts; keys of
// one merchant, after a rotation, share its entry).
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
  /** The owner a key stands for, as owner records name it, when it is known at once (default: the key's hash). */
  ownerOf?: (key: string) => string;
  /**
   * The owner a key stands for as the store knows it now (its merchant, through key links): asked once per key
   * remembered.
   */
  resolveOwner?: (key: string) => Promise<string>;
  max?: number;
}

export class OwnerKeys {
  /** Owner → its most recent key; a Map keeps insertion order, so the first is the least recently heard. */
  readonly #keys = new Map<string, string>();
  readonly #max: number;
  readonly #listeners = new Set<(owner: string) => void>();
  /** The owner each kept key was remembered for (only keys in #keys: an owner's former key leaves with its entry). */
  readonly #ownerByKey = new Map<string, string>();
  readonly #fallbackOwner: (key: string) => string;
  readonly #resolveOwner: ((key: string) => Promise<string>) | undefined;

  constructor(options: OwnerKeysOptions = {}) {
    this.#fallbackOwner = options.ownerOf ?? hashKey;
    this.#resolveOwner = options.resolveOwner;
    this.#max = options.max ?? OWNER_KEYS_MAX;
  }

  /**
   * The owner a key stands for: the one it was remembered for, else what is known at once (a merchant's first key: its
   * own hash).
   */
  ownerOf(key: string): string {
    return this.#ownerByKey.get(key) ?? this.#fallbackOwner(key);
  }

  /** The upstream accepted this key: the owner's key from now on (once its owner is resolved, with resolveOwner). */
  remember(key: string): void {
    if (!this.#resolveOwner) return this.#rememberAs(this.#fallbackOwner(key), key);
    // A store that cannot say now leaves the key out until it is accepted again.
    this.#resolveOwner(key).then(
      (owner) => this.#rememberAs(owner, key),
      () => undefined,
    );
  }

  #rememberAs(owner: string, key: string): void {
    const known = this.#keys.get(owner);
    if (known !== undefined && known !== key) this.#ownerByKey.delete(known);
    this.#keys.delete(owner);
    this.#keys.set(owner, key);
    this.#ownerByKey.set(key, owner);
    if (known !== undefined) return;
    if (this.#keys.size > this.#max) {
      const [oldest, oldestKey] = this.#keys.entries().next().value!;
      this.#keys.delete(oldest);
      this.#ownerByKey.delete(oldestKey);
    }
    for (const listener of this.#listeners) listener(owner);
  }

  /** The upstream refused this key: forgotten, unless the owner has another key by now. */
  forget(key: string): void {
    const owner = this.ownerOf(key);
    if (this.#keys.get(owner) !== key) return;
    this.#keys.delete(owner);
    this.#ownerByKey.delete(key);
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

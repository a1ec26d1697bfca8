// Merchant keys are secrets: the facade never stores or logs one, only this hash.
// Limits and the key memory use it as it is; a key hash with no link is also its
// merchant's id (src/access/merchants.ts), which owns records, idempotency keys and cursors.
import { createHash } from 'node:crypto';

/**
 * The hashes of the keys seen last, so that a request's several uses (its limits,
 * what the upstream said about the key) cost one SHA-256 between them. Kept in
 * this process's memory only, like the key in the request itself; never stored
 * or logged. Bounded: the oldest entry goes first.
 */
const recent = new Map<string, string>();
const RECENT_KEYS = 1024;

/** Merchant keys are never stored: only this hash of them. */
export function hashKey(key: string): string {
  let hash = recent.get(key);
  if (hash === undefined) {
    hash = createHash('sha256').update(`delivery-graph:merchant-key:${key}`).digest('hex');
    if (recent.size >= RECENT_KEYS) recent.delete(recent.keys().next().value!);
    recent.set(key, hash);
  }
  return hash;
}

// Merchant keys are secrets: the facade never stores or logs one, only this hash
// (ownership records, idempotency keys, limits, cursors and the key memory all use it).
import { createHash } from 'node:crypto';

/** Merchant keys are never stored: only this hash of them. */
export function hashKey(key: string): string {
  return createHash('sha256').update(`delivery-graph:merchant-key:${key}`).digest('hex');
}

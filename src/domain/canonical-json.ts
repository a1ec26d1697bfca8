// Equal values give equal text: how webhook events are de-duplicated (same uid,
// event name and canonical payload) and how booking input is fingerprinted for
// idempotency.
import { createHash } from 'node:crypto';

/** A JSON object as received (a webhook body, a REST answer): any keys, values not yet checked. */
export type JsonObject = { [key: string]: unknown };

/**
 * JSON with object keys sorted, so equal values give equal text. Iterative (an
 * explicit stack of pending text pieces and values), so a value nested thousands
 * of levels deep cannot overflow the call stack.
 */
export function canonicalJson(value: unknown): string {
  const out: string[] = [];
  // Each entry is a value still to write, or literal text (a separator, a closing bracket).
  const work: Array<{ text: string } | { value: unknown }> = [{ value }];
  while (work.length > 0) {
    const next = work.pop()!;
    if ('text' in next) {
      out.push(next.text);
      continue;
    }
    const current = next.value;
    if (Array.isArray(current)) {
      const pieces: Array<{ text: string } | { value: unknown }> = [{ text: '[' }];
      current.forEach((inner, index) => {
        if (index > 0) pieces.push({ text: ',' });
        pieces.push({ value: inner === undefined ? null : inner });
      });
      pieces.push({ text: ']' });
      for (let i = pieces.length - 1; i >= 0; i -= 1) work.push(pieces[i]!);
    } else if (current && typeof current === 'object') {
      const entries = Object.entries(current as Record<string, unknown>)
        .filter(([, inner]) => inner !== undefined)
        .sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
      const pieces: Array<{ text: string } | { value: unknown }> = [{ text: '{' }];
      entries.forEach(([key, inner], index) => {
        pieces.push({ text: `${index > 0 ? ',' : ''}${JSON.stringify(key)}:` }, { value: inner });
      });
      pieces.push({ text: '}' });
      for (let i = pieces.length - 1; i >= 0; i -= 1) work.push(pieces[i]!);
    } else {
      out.push(JSON.stringify(current ?? null));
    }
  }
  return out.join('');
}

/** The SHA-256 of a value's canonical JSON. */
export function fingerprint(value: unknown): string {
  return createHash('sha256').update(canonicalJson(value)).digest('hex');
}

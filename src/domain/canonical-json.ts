// Equal values give equal text: how webhook events are de-duplicated (same uid,
// event name and canonical payload) and how booking input is fingerprinted for
// idempotency.
import { createHash } from 'node:crypto';

/** A JSON object as received (a webhook body, a REST answer): any keys, values not yet checked. */
export type JsonObject = { [key: string]: unknown };

/** Levels the recursive form goes down before the value is written by the iterative one. */
const RECURSION_DEPTH = 256;
const TOO_DEEP = Symbol('too deep');

/**
 * JSON with object keys sorted, so equal values give equal text. The text is
 * stored with every event (its hash de-duplicates), so it never changes: the
 * recursive form below, a few times faster (it is computed for every webhook on
 * the store's writer thread), writes exactly what the iterative one does, which
 * takes over for values nested deeper than RECURSION_DEPTH.
 */
export function canonicalJson(value: unknown): string {
  try {
    return canonicalText(value, 0);
  } catch (error) {
    if (error !== TOO_DEEP) throw error;
    return canonicalJsonIterative(value);
  }
}

function canonicalText(value: unknown, depth: number): string {
  // As JSON.stringify writes it; a value it has no text for (a function) writes nothing, as join() does.
  if (value === null || typeof value !== 'object') return JSON.stringify(value ?? null) ?? '';
  if (depth === RECURSION_DEPTH) throw TOO_DEEP;
  if (Array.isArray(value)) {
    let text = '[';
    for (let index = 0; index < value.length; index += 1) {
      // A hole is skipped (its comma kept), as forEach skips it; undefined is null.
      if (!(index in value)) continue;
      if (index > 0) text += ',';
      const inner: unknown = value[index];
      text += canonicalText(inner === undefined ? null : inner, depth + 1);
    }
    return `${text}]`;
  }
  let text = '{';
  let first = true;
  // Sorted by UTF-16 code units, as the < comparison of the iterative form sorts them.
  for (const key of Object.keys(value).sort()) {
    const inner = (value as Record<string, unknown>)[key];
    if (inner === undefined) continue;
    text += `${first ? '' : ','}${JSON.stringify(key)}:${canonicalText(inner, depth + 1)}`;
    first = false;
  }
  return `${text}}`;
}

/**
 * The same text, iteratively (an explicit stack of pending text pieces and
 * values), so a value nested thousands of levels deep cannot overflow the call stack.
 */
function canonicalJsonIterative(value: unknown): string {
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

// What the facade accepts as a delivery uid, and as a partner reference, before
// either goes into an upstream URL path (/{platform}/deliveries/{uid},
// /orders/{uid}, /orders/partner/{reference}). A uid is the upstream's own
// identifier, a UUID on both groups (openapi/upstream.yaml; the sandbox makes
// them with randomUUID), so anything that is not one plain path segment can
// only be a mistake or an attempt to reach another route: "." and ".." would be
// resolved away by the upstream's URL parser (/deliveries/../cancel), and a 900 KB
// one would be forwarded as it is. A partner reference is the merchant's own
// text, where "/" and spaces are common (PO/2024 17): it travels URL-encoded
// (%2F, %20) inside its one segment, and only what no encoding keeps in its
// segment, or what has no business in a reference, is refused. docs/limits.md
// says the same for clients. The upstream clients refuse what this says no to,
// whatever path it came by; resolvers may say so first, naming their argument
// (src/graphql/uid-arguments.ts).
import { INPUT_LIMITS } from './limits.js';

/**
 * Longest uid accepted: the upstream's are UUIDs (36 characters); 64 leaves room for another shape (a ULID, a prefixed
 * id).
 */
export const MAX_UID_LENGTH = 64;

/** Longest partner reference accepted: the bound a reference has in a booking's input. */
export const MAX_PARTNER_REFERENCE_LENGTH = INPUT_LIMITS.shortText;

/** RFC 3986's unreserved characters: a segment made of them means the same encoded or not, through any proxy. */
const UID_CHARACTERS = /^[A-Za-z0-9._~-]+$/;
const CONTROL_CHARACTERS = /\p{Cc}/u;

/** Why `value` is not a uid, as the end of a sentence that starts with its name; undefined when it is one. */
export function uidProblem(value: string): string | undefined {
  if (value.trim() === '') return 'must not be empty';
  if (value.length > MAX_UID_LENGTH) return `must be at most ${MAX_UID_LENGTH} characters; got ${value.length}`;
  if (value === '.' || value === '..') return 'must not be "." or ".."';
  if (UID_CHARACTERS.test(value)) return undefined;
  if (/[/\\]/.test(value)) return 'must not contain "/" or "\\"';
  if (/\s/.test(value) || CONTROL_CHARACTERS.test(value)) return 'must not contain whitespace or control characters';
  return 'may only hold ASCII letters, digits, "-", "_", "." and "~"';
}

/** Why `value` is not a partner reference that can be looked up; undefined when it is one. */
export function partnerReferenceProblem(value: string): string | undefined {
  if (value.trim() === '') return 'must not be empty';
  if (value.length > MAX_PARTNER_REFERENCE_LENGTH)
    return `must be at most ${MAX_PARTNER_REFERENCE_LENGTH} characters; got ${value.length}`;
  // Dots are not percent-encoded, so these two would still be resolved as path steps.
  if (value === '.' || value === '..') return 'must not be "." or ".."';
  if (CONTROL_CHARACTERS.test(value)) return 'must not contain control characters';
  return undefined;
}

/**
 * The sentence that refuses `value` as a uid, naming it `name` (the argument, e.g. `uid` or `uids[2]`); undefined for a
 * uid.
 */
export function uidRefusal(value: string, name: string): string | undefined {
  const problem = uidProblem(value);
  return problem && `${name} ${problem}.`;
}

/** The sentence that refuses `value` as a partner reference, naming it `name`; undefined for a reference. */
export function partnerReferenceRefusal(value: string, name: string): string | undefined {
  const problem = partnerReferenceProblem(value);
  return problem && `${name} ${problem}.`;
}

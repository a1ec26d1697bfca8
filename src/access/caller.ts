// Who is asking: the bearer credential of a request (or of a WebSocket's
// connection_init), read once, and what it has earned. Every transport reads
// the caller here and hands the same object to the pipeline, which decides from
// it alone what the request may cost and run; the resolvers' context is made
// from it too, so no second reading can disagree with the first.
import type { KnownKeys } from '../upstream/known-keys.js';
import { looksLikeClientToken, type ClientTokenGrant, type ClientTokens } from './client-tokens.js';

/** A client token as read from a request: its grant and its own text. */
export interface ClientTokenCredential extends ClientTokenGrant {
  readonly token: string;
}

export type Caller =
  /** No credential at all. */
  | { readonly kind: 'anonymous' }
  /** A merchant key (whether the upstream accepts it is KnownKeys' question, asked per operation). */
  | { readonly kind: 'merchant'; readonly key: string }
  /** A client token this server (or one sharing its secret) made, unexpired when read. */
  | { readonly kind: 'client-token'; readonly key: string; readonly token: ClientTokenCredential }
  /** Something shaped like a client token that does not decrypt (altered, expired, foreign). */
  | { readonly kind: 'refused-token' };

export const ANONYMOUS: Caller = Object.freeze({ kind: 'anonymous' });
const REFUSED_TOKEN: Caller = Object.freeze({ kind: 'refused-token' });

/** `Bearer <credential>` (scheme case-insensitive) → credential. */
export function bearerCredential(header: string | null | undefined): string | undefined {
  if (!header) return undefined;
  const match = /^\s*bearer\s+(\S+)\s*$/i.exec(header);
  return match?.[1];
}

/**
 * The caller an Authorization value names: synchronous for everything but a
 * client token, whose decryption ClientTokens remembers until it expires.
 */
export function readCaller(authorization: string | null | undefined, tokens: ClientTokens): Caller | Promise<Caller> {
  const credential = bearerCredential(authorization);
  if (credential === undefined) return ANONYMOUS;
  if (!looksLikeClientToken(credential)) return { kind: 'merchant', key: credential };
  return tokens
    .read(credential)
    .then((grant) =>
      grant ? { kind: 'client-token', key: grant.key, token: { ...grant, token: credential } } : REFUSED_TOKEN,
    );
}

/**
 * What a caller has earned for one operation, decided once from one fact each:
 * - `earned`: a client token this server made, or a merchant key the upstream
 *   accepted recently. Its documents are kept in the shared caches and compiled.
 * - `trying`: a merchant key nobody has judged yet, which anyone can make up. It
 *   may run anything, since what needs the key goes to the upstream, which judges
 *   it; until then it gets no more than `keyless`: nothing it sends is kept or
 *   compiled, its address pays for the try and for the work of each operation,
 *   what needs no key is held to keyless limits, and over HTTP its body to the
 *   keyless bound unless the upstream accepts the key first (see
 *   access/rate-limit.ts, http/graphql.ts).
 * - `keyless`: no credential, an Authorization that is not a Bearer credential,
 *   a refused client token, or a key the upstream refused. Only what needs no
 *   key runs (`__typename`, `_service`, introspection where enabled), parsed for
 *   this request alone, its work charged to its address.
 */
export type Trust = 'earned' | 'trying' | 'keyless';

export function trustOf(caller: Caller, keys: KnownKeys): Trust {
  switch (caller.kind) {
    case 'client-token':
      return caller.token.expiresAt.getTime() > Date.now() ? 'earned' : 'keyless';
    case 'merchant': {
      const standing = keys.standing(caller.key);
      return standing === 'accepted' ? 'earned' : standing === 'unknown' ? 'trying' : 'keyless';
    }
    default:
      return 'keyless';
  }
}

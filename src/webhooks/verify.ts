// Webhook JWT verification: RS256 only, the configured issuer, exp required.
// The event is the signed `payload` claim, never the unsigned body.
// jose imports the keys (its key rules: RSA, 2048 bits or more) and decodes the
// header and the claims (decodeProtectedHeader, decodeJwt); the signature is
// checked here, synchronously with node:crypto and the cached key, and jose's
// rules for crit, alg and the claims are applied in jwtVerify's order, with its
// error codes as reasons: jose's own verify goes through WebCrypto and libuv's
// thread pool, which costs several times the check itself (docs/architecture.md,
// "Mechanisms beside a library's own"; bench/probes/verify.mjs measures both).
// test/unit/webhook-verify.test.ts holds the two side by side on every kind of bad token.
import { KeyObject, verify as verifySignature } from 'node:crypto';
import { decodeJwt, decodeProtectedHeader, importSPKI } from 'jose';
import { MAX_EVENT_DEPTH, nestsDeeperThan } from '../domain/limits.js';
import type { WireWebhookEvent } from '../upstream/wire.js';

/** Default seconds of clock skew tolerated on exp (and nbf/iat when present): WEBHOOK_CLOCK_TOLERANCE_SECONDS. */
export const CLOCK_TOLERANCE_SECONDS = 30;

/** RS256 keys shorter than this are refused (jose's rule, and config.ts's). */
const MIN_RSA_BITS = 2048;

export class WebhookAuthError extends Error {
  override name = 'WebhookAuthError';
}

export class WebhookPayloadError extends Error {
  override name = 'WebhookPayloadError';
}

export interface WebhookVerifier {
  /** The verified event; WebhookAuthError for a bad token, WebhookPayloadError for a bad payload claim. */
  verify(authorization: string | undefined): Promise<WireWebhookEvent>;
}

/** A refusal, by jose's error code for the same fault (the reason logged). */
class TokenRefused extends Error {
  constructor(readonly code: string) {
    super(code);
  }
}

const INVALID = 'ERR_JWS_INVALID';

/**
 * A segment's bytes, decoded as jose does on Node (atob's forgiving base64 after
 * mapping the URL alphabet): padding only where it completes a group of four,
 * never a lone trailing character. undefined when it does not decode.
 */
function base64urlBytes(segment: string): Buffer | undefined {
  let text = segment;
  if (text.length % 4 === 0 && text.endsWith('=')) text = text.slice(0, text.endsWith('==') ? -2 : -1);
  if (text.length % 4 === 1 || !/^[A-Za-z0-9_-]*$/.test(text)) return undefined;
  return Buffer.from(text, 'base64url');
}

/**
 * RSASSA-PKCS1-v1_5 with SHA-256 (RS256); a signature OpenSSL cannot even read is one that does not match, as in jose.
 */
function signedBy(key: KeyObject, signed: Buffer, signature: Buffer): boolean {
  try {
    return verifySignature('sha256', signed, key, signature);
  } catch {
    return false;
  }
}

/** jose's decoding, with its refusal as `code` (a header it cannot read is a JWS fault, as jwtVerify says). */
function decoded<T>(decode: () => T, code: string): T {
  try {
    return decode();
  } catch {
    throw new TokenRefused(code);
  }
}

/**
 * The protected header's rules as jose applies them: an object, `crit` naming
 * only `b64` (present, a boolean), `alg` RS256. Returns whether the payload is
 * base64url-encoded (b64), which a JWT must be.
 */
function checkHeader(token: string): boolean {
  const header = decoded(() => decodeProtectedHeader(token) as Record<string, unknown>, INVALID);
  let b64 = true;
  if (header.crit !== undefined) {
    const { crit } = header;
    if (!Array.isArray(crit) || crit.length === 0 || crit.some((name) => typeof name !== 'string' || name.length === 0))
      throw new TokenRefused(INVALID);
    for (const name of crit as string[]) {
      if (name !== 'b64') throw new TokenRefused('ERR_JOSE_NOT_SUPPORTED');
      if (header.b64 === undefined) throw new TokenRefused(INVALID);
    }
    if (typeof header.b64 !== 'boolean') throw new TokenRefused(INVALID);
    b64 = header.b64;
  }
  if (typeof header.alg !== 'string' || header.alg === '') throw new TokenRefused(INVALID);
  if (header.alg !== 'RS256') throw new TokenRefused('ERR_JOSE_ALG_NOT_ALLOWED');
  return b64;
}

/** The claims' rules as jose's jwtVerify applies them with { issuer, requiredClaims: ['exp'], clockTolerance }. */
function checkClaims(claims: Record<string, unknown>, issuer: string, tolerance: number): void {
  const claimFailed = 'ERR_JWT_CLAIM_VALIDATION_FAILED';
  if (!Object.hasOwn(claims, 'iss') || !Object.hasOwn(claims, 'exp')) throw new TokenRefused(claimFailed);
  if (claims.iss !== issuer) throw new TokenRefused(claimFailed);
  const now = Math.floor(Date.now() / 1000);
  if (claims.iat !== undefined && typeof claims.iat !== 'number') throw new TokenRefused(claimFailed);
  if (claims.nbf !== undefined && (typeof claims.nbf !== 'number' || claims.nbf > now + tolerance))
    throw new TokenRefused(claimFailed);
  if (typeof claims.exp !== 'number') throw new TokenRefused(claimFailed);
  if (claims.exp <= now - tolerance) throw new TokenRefused('ERR_JWT_EXPIRED');
}

/**
 * A verifier for tokens signed by any of these keys (SPKI PEM): during a key
 * change the file holds the old key and the new one. A token is tried against
 * the next key only when the signature did not match; any other fault (expired,
 * another issuer) is final. `clockToleranceSeconds` is how long after its `exp`
 * a token still passes: the document only says exp "must not have passed", and
 * two clocks never agree to the second.
 */
export async function createWebhookVerifier(
  publicKeyPems: string | readonly string[],
  issuer: string,
  { clockToleranceSeconds = CLOCK_TOLERANCE_SECONDS }: { clockToleranceSeconds?: number } = {},
): Promise<WebhookVerifier> {
  const imported = await Promise.all(
    (typeof publicKeyPems === 'string' ? [publicKeyPems] : publicKeyPems).map((pem) => importSPKI(pem, 'RS256')),
  );
  if (imported.length === 0) throw new Error('createWebhookVerifier needs at least one key');
  const keys = imported.map((key) => (key instanceof KeyObject ? key : KeyObject.from(key)));
  for (const key of keys) {
    if ((key.asymmetricKeyDetails?.modulusLength ?? 0) < MIN_RSA_BITS)
      throw new Error(`RS256 needs an RSA key of ${MIN_RSA_BITS} bits or more`);
  }
  if (!Number.isFinite(clockToleranceSeconds) || clockToleranceSeconds < 0)
    throw new Error('clockToleranceSeconds must be a number of seconds, 0 or more');

  /** The token's claims once its header, signature (against any key) and claims pass; TokenRefused otherwise. */
  const claimsOf = (token: string): Record<string, unknown> => {
    const parts = token.split('.');
    if (parts.length !== 3) throw new TokenRefused(INVALID);
    const [header, payload, signature] = parts as [string, string, string];
    const b64 = checkHeader(token);
    const signatureBytes = base64urlBytes(signature);
    if (!signatureBytes) throw new TokenRefused(INVALID);
    // The signed input is the token's first two segments as they were sent (ASCII: the bearer pattern admits nothing
    // else).
    const signed = Buffer.from(token.slice(0, header.length + 1 + payload.length), 'latin1');
    if (!keys.some((key) => signedBy(key, signed, signatureBytes)))
      throw new TokenRefused('ERR_JWS_SIGNATURE_VERIFICATION_FAILED');
    if (b64 && !base64urlBytes(payload)) throw new TokenRefused(INVALID);
    // A JWT's payload is always encoded (RFC 7797's unencoded form is for other JWS).
    if (!b64) throw new TokenRefused('ERR_JWT_INVALID');
    const claims = decoded(() => decodeJwt(token) as Record<string, unknown>, 'ERR_JWT_INVALID');
    checkClaims(claims, issuer, clockToleranceSeconds);
    return claims;
  };

  return {
    async verify(authorization) {
      const token = /^Bearer ([A-Za-z0-9_\-.=]+)$/.exec(authorization?.trim() ?? '')?.[1];
      if (!token) throw new WebhookAuthError('missing bearer token');
      let payload: unknown;
      try {
        payload = claimsOf(token).payload;
      } catch (error) {
        throw new WebhookAuthError(error instanceof TokenRefused ? error.code : 'invalid token');
      }
      // Read liberally: a payload claim that is the JSON text of an object is that object.
      if (typeof payload === 'string') payload = parseObject(payload);
      if (!payload || typeof payload !== 'object' || Array.isArray(payload))
        throw new WebhookPayloadError('the payload claim is not an object');
      // Deeper than any real event: refused here, before anything walks it (hashing, storing, mapping).
      if (nestsDeeperThan(payload, MAX_EVENT_DEPTH))
        throw new WebhookPayloadError(`the event is nested deeper than ${MAX_EVENT_DEPTH} levels`);
      const event = payload as Record<string, unknown>;
      if (typeof event.uid !== 'string' || event.uid === '') throw new WebhookPayloadError('the event has no uid');
      if (typeof event.event_name !== 'string' || event.event_name === '')
        throw new WebhookPayloadError('the event has no event_name');
      return event as unknown as WireWebhookEvent;
    },
  };
}

function parseObject(text: string): unknown {
  try {
    return JSON.parse(text);
  } catch {
    throw new WebhookPayloadError('the payload claim is a string that is not JSON');
  }
}

// Webhook JWT verification with jose: RS256 only, the configured issuer, exp
// required. The event is the signed `payload` claim, never the unsigned body.
import { importSPKI, jwtVerify, type KeyObject } from 'jose';
import { MAX_EVENT_DEPTH, nestsDeeperThan } from '../domain/limits.js';
import type { WireWebhookEvent } from '../upstream/wire.js';

/** Default seconds of clock skew tolerated on exp (and nbf/iat when present): WEBHOOK_CLOCK_TOLERANCE_SECONDS. */
export const CLOCK_TOLERANCE_SECONDS = 30;

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
  const keys: Array<KeyObject | CryptoKey> = await Promise.all((typeof publicKeyPems === 'string' ? [publicKeyPems] : publicKeyPems).map((pem) => importSPKI(pem, 'RS256')));
  if (keys.length === 0) throw new Error('createWebhookVerifier needs at least one key');
  const verifyWithAny = async (token: string) => {
    for (let index = 0; ; index += 1) {
      try {
        return await jwtVerify(token, keys[index]!, { algorithms: ['RS256'], issuer, requiredClaims: ['exp'], clockTolerance: clockToleranceSeconds });
      } catch (error) {
        const last = index === keys.length - 1;
        if (last || (error as { code?: string }).code !== 'ERR_JWS_SIGNATURE_VERIFICATION_FAILED') throw error;
      }
    }
  };
  return {
    async verify(authorization) {
      const token = /^Bearer ([A-Za-z0-9_\-.=]+)$/.exec(authorization?.trim() ?? '')?.[1];
      if (!token) throw new WebhookAuthError('missing bearer token');
      let payload: unknown;
      try {
        ({ payload } = await verifyWithAny(token).then((result) => ({ payload: result.payload.payload })));
      } catch (error) {
        throw new WebhookAuthError((error as { code?: string }).code ?? 'invalid token');
      }
      // Read liberally: a payload claim that is the JSON text of an object is that object.
      if (typeof payload === 'string') payload = parseObject(payload);
      if (!payload || typeof payload !== 'object' || Array.isArray(payload)) throw new WebhookPayloadError('the payload claim is not an object');
      // Deeper than any real event: refused here, before anything walks it (hashing, storing, mapping).
      if (nestsDeeperThan(payload, MAX_EVENT_DEPTH)) throw new WebhookPayloadError(`the event is nested deeper than ${MAX_EVENT_DEPTH} levels`);
      const event = payload as Record<string, unknown>;
      if (typeof event.uid !== 'string' || event.uid === '') throw new WebhookPayloadError('the event has no uid');
      if (typeof event.event_name !== 'string' || event.event_name === '') throw new WebhookPayloadError('the event has no event_name');
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

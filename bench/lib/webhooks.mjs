// Signed webhooks for the realtime scenarios (posted from bench/load/webhook-poster.mjs)
// and the soaks.
import { generateKeyPairSync, sign } from 'node:crypto';
import { Pool } from 'undici';

export const ISSUER = 'bench';

export function keyPair() {
  const { publicKey, privateKey } = generateKeyPairSync('rsa', { modulusLength: 2048 });
  return {
    publicKeyPem: publicKey.export({ type: 'spki', format: 'pem' }),
    privateKey,
    // For the poster processes, which sign their own events (the bench's throwaway key, never a merchant's).
    privateKeyPem: privateKey.export({ type: 'pkcs8', format: 'pem' }),
  };
}

const b64 = (value) => Buffer.from(typeof value === 'string' ? value : JSON.stringify(value)).toString('base64url');
const HEADER = b64({ alg: 'RS256', typ: 'JWT' });

/** An RS256 JWT with the event as its `payload` claim, signed with node:crypto (cheaper than jose for thousands). */
export function signEvent(privateKey, event) {
  const claims = b64({
    iss: ISSUER,
    exp: Math.floor(Date.now() / 1000) + 3600,
    iat: Math.floor(Date.now() / 1000),
    payload: event,
  });
  const input = `${HEADER}.${claims}`;
  return `${input}.${sign('RSA-SHA256', Buffer.from(input), privateKey).toString('base64url')}`;
}

export function webhookPoster(origin) {
  const pool = new Pool(origin, { connections: 64, pipelining: 1 });
  return {
    /** `event` is the body: an object, or its JSON already serialized. `signal` gives up on it (a deadline, say). */
    async post(token, event, { signal } = {}) {
      const response = await pool.request({
        method: 'POST',
        path: '/webhooks',
        headers: { 'content-type': 'application/json', authorization: `Bearer ${token}` },
        body: typeof event === 'string' ? event : JSON.stringify(event),
        signal,
      });
      await response.body.arrayBuffer();
      return response.statusCode;
    },
    close: () => pool.close(),
  };
}

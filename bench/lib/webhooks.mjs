// Signed webhooks and graphql-ws subscriber fleets for the realtime scenarios.
import { createPrivateKey, generateKeyPairSync, sign } from 'node:crypto';
import { createClient } from 'graphql-ws';
import { Pool } from 'undici';
import WebSocket from 'ws';

export const ISSUER = 'bench';

export function keyPair() {
  const { publicKey, privateKey } = generateKeyPairSync('rsa', { modulusLength: 2048 });
  return { publicKeyPem: publicKey.export({ type: 'spki', format: 'pem' }), privateKey };
}

const b64 = (value) => Buffer.from(typeof value === 'string' ? value : JSON.stringify(value)).toString('base64url');
const HEADER = b64({ alg: 'RS256', typ: 'JWT' });

/** An RS256 JWT with the event as its `payload` claim, signed with node:crypto (cheaper than jose for thousands). */
export function signEvent(privateKey, event) {
  const claims = b64({ iss: ISSUER, exp: Math.floor(Date.now() / 1000) + 3600, iat: Math.floor(Date.now() / 1000), payload: event });
  const input = `${HEADER}.${claims}`;
  return `${input}.${sign('RSA-SHA256', Buffer.from(input), privateKey).toString('base64url')}`;
}

export function webhookPoster(origin) {
  const pool = new Pool(origin, { connections: 64, pipelining: 1 });
  return {
    async post(token, event) {
      const response = await pool.request({
        method: 'POST',
        path: '/webhooks',
        headers: { 'content-type': 'application/json', authorization: `Bearer ${token}` },
        body: JSON.stringify(event),
      });
      await response.body.arrayBuffer();
      return response.statusCode;
    },
    close: () => pool.close(),
  };
}

/**
 * Opens `count` graphql-ws connections, each with one deliveryEvents
 * subscription to `uidOf(i)`, and resolves once all are subscribed.
 */
export async function subscriberFleet(origin, key, count, uidOf, onEvent) {
  const url = `${origin.replace('http', 'ws')}/graphql`;
  const clients = [];
  const batch = 200;
  for (let start = 0; start < count; start += batch) {
    await Promise.all(
      Array.from({ length: Math.min(batch, count - start) }, (_, j) => {
        const i = start + j;
        const client = createClient({ url, webSocketImpl: WebSocket, connectionParams: { authorization: `Bearer ${key}` }, retryAttempts: 0, lazy: false });
        clients.push(client);
        return new Promise((resolve, reject) => {
          // Subscribed once the server ran the stream's setup: a probe event is not needed,
          // the facade acknowledges nothing, so wait for the connection and a short settle.
          client.subscribe(
            { query: 'subscription($uids: [ID!]) { deliveryEvents(uids: $uids) { uid statusText } }', variables: { uids: [uidOf(i)] } },
            { next: (message) => onEvent(i, message.data?.deliveryEvents), error: reject, complete: () => undefined },
          );
          client.on('connected', () => resolve());
        });
      }),
    );
  }
  return { clients, close: () => Promise.all(clients.map((client) => client.dispose())) };
}

// WEBHOOK_CLOCK_TOLERANCE_SECONDS: how long after its `exp` a webhook token is
// still accepted (the document says only that exp "must not have passed").
// Tokens are signed in the test with the key the facade trusts and POSTed over
// real HTTP; the verifier is also asked directly, at its bounds.
import { randomUUID } from 'node:crypto';
import { exportPKCS8, exportSPKI, generateKeyPair, SignJWT, type CryptoKey } from 'jose';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createWebhookVerifier } from '../../src/webhooks/verify.js';
import { startStack, type Stack } from '../helpers/stack.js';

const now = () => Math.floor(Date.now() / 1000);

let privateKey: CryptoKey;
let privateKeyPem: string;
let publicKeyPem: string;
/** The default tolerance (30 s), and none at all. */
let lenient: Stack;
let strict: Stack;

beforeAll(async () => {
  const pair = await generateKeyPair('RS256', { extractable: true });
  privateKey = pair.privateKey;
  privateKeyPem = await exportPKCS8(pair.privateKey);
  publicKeyPem = await exportSPKI(pair.publicKey);
  [lenient, strict] = await Promise.all([
    startStack({ sandbox: { privateKeyPem } }),
    startStack({ sandbox: { privateKeyPem }, env: { WEBHOOK_CLOCK_TOLERANCE_SECONDS: '0' } }),
  ]);
  // Only the test's own tokens reach the receivers.
  for (const stack of [lenient, strict]) stack.sandbox.setWebhookUrl(undefined);
});
afterAll(async () => {
  await Promise.all([lenient?.stop(), strict?.stop()]);
});

function signed(uid: string, exp: number, issuer: string): Promise<string> {
  const payload = { uid, event_name: 'delivery.created', status: 'Created', platform_payload: { orderId: 'A-1' } };
  return new SignJWT({ payload })
    .setProtectedHeader({ alg: 'RS256', typ: 'JWT' })
    .setIssuer(issuer)
    .setExpirationTime(exp)
    .sign(privateKey);
}

/**
 * POSTs a delivery.created for a fresh uid whose token expired `secondsAgo` ago: the answer, and whether the event log
 * grew.
 */
async function sendExpired(stack: Stack, secondsAgo: number): Promise<{ status: number; stored: boolean }> {
  const uid = randomUUID();
  const token = await signed(uid, now() - secondsAgo, stack.sandbox.issuer);
  const before = await stack.app.services.store.lastSeq();
  const response = await fetch(`${stack.app.url}/webhooks`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', authorization: `Bearer ${token}` },
    body: JSON.stringify({ uid, event_name: 'delivery.created' }),
  });
  const body = (await response.json().catch(() => undefined)) as { status?: string } | undefined;
  const stored = (await stack.app.services.store.lastSeq()) > before;
  if (response.status === 200) expect(body?.status).toBe('stored');
  return { status: response.status, stored };
}

describe('a token expired 10 s ago', () => {
  it('is accepted and stored with the default tolerance of 30 s', async () => {
    expect(await sendExpired(lenient, 10)).toEqual({ status: 200, stored: true });
  });

  it('is refused 401, nothing stored, with WEBHOOK_CLOCK_TOLERANCE_SECONDS=0', async () => {
    expect(await sendExpired(strict, 10)).toEqual({ status: 401, stored: false });
  });

  it('while a token that has not expired is accepted under either', async () => {
    expect(await sendExpired(strict, -60)).toEqual({ status: 200, stored: true });
    expect(await sendExpired(lenient, -60)).toEqual({ status: 200, stored: true });
  });

  it('and one expired past the tolerance is refused under the default too', async () => {
    expect(await sendExpired(lenient, 45)).toEqual({ status: 401, stored: false });
  });
});

describe('createWebhookVerifier at the bounds of its tolerance', () => {
  const ISSUER = 'lastmile';
  const verdict = async (clockToleranceSeconds: number | undefined, secondsAgo: number) => {
    const verifier = await createWebhookVerifier(
      publicKeyPem,
      ISSUER,
      clockToleranceSeconds === undefined ? undefined : { clockToleranceSeconds },
    );
    return verifier.verify(`Bearer ${await signed(randomUUID(), now() - secondsAgo, ISSUER)}`).then(
      () => 'accepted',
      (error: Error) => `${error.name}: ${error.message}`,
    );
  };

  it('takes 30 s when told nothing', async () => {
    expect(await verdict(undefined, 10)).toBe('accepted');
    expect(await verdict(undefined, 45)).toBe('WebhookAuthError: ERR_JWT_EXPIRED');
  });

  it('takes the tolerance it is given', async () => {
    expect(await verdict(30, 10)).toBe('accepted');
    expect(await verdict(0, 10)).toBe('WebhookAuthError: ERR_JWT_EXPIRED');
    expect(await verdict(5, 10)).toBe('WebhookAuthError: ERR_JWT_EXPIRED');
    expect(await verdict(120, 90)).toBe('accepted');
  });
});

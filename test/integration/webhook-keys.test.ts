// The webhook key file in each form an account manager hands out (SPKI "PUBLIC
// KEY", PKCS#1 "RSA PUBLIC KEY", an X.509 "CERTIFICATE", in PEM or DER) verifies
// real webhooks; and a payload claim sent as JSON text is read as the object.
import { createPrivateKey, createPublicKey, generateKeyPairSync, type KeyObject } from 'node:crypto';
import { mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { SignJWT } from 'jose';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startSandbox } from '@delivery-graph/sandbox';
import { deliveryInput, startStack, type Stack } from '../helpers/stack.js';

const fixtures = new URL('../fixtures/webhook-keys/', import.meta.url);
const privateKey = createPrivateKey(readFileSync(new URL('test-only-private.pem', fixtures)));
const publicKey = createPublicKey(privateKey);

/** Each form of the same public key, written to a file. */
const FORMS: Record<string, () => Buffer | string> = {
  'SPKI PEM ("PUBLIC KEY")': () => publicKey.export({ type: 'spki', format: 'pem' }),
  'PKCS#1 PEM ("RSA PUBLIC KEY")': () => publicKey.export({ type: 'pkcs1', format: 'pem' }),
  'X.509 certificate, PEM': () => readFileSync(new URL('certificate.pem', fixtures)),
  'X.509 certificate, DER': () => readFileSync(new URL('certificate.der', fixtures)),
  'SPKI DER': () => publicKey.export({ type: 'spki', format: 'der' }),
};

async function sign(payload: unknown, issuer: string): Promise<string> {
  return new SignJWT({ payload })
    .setProtectedHeader({ alg: 'RS256', typ: 'JWT' })
    .setIssuer(issuer)
    .setIssuedAt()
    .setExpirationTime('5m')
    .sign(privateKey);
}

async function postEvent(stack: Stack, payload: unknown): Promise<{ status: number; body: any }> {
  const token = await sign(payload, stack.sandbox.issuer);
  const response = await fetch(`${stack.app.url}/webhooks`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', authorization: `Bearer ${token}` },
    body: typeof payload === 'string' ? payload : JSON.stringify(payload),
  });
  return { status: response.status, body: await response.json() };
}

describe.each(Object.entries(FORMS))('a key file holding %s', (form, contents) => {
  let stack: Stack;
  beforeAll(async () => {
    const dir = mkdtempSync(path.join(tmpdir(), 'dg-keys-'));
    const file = path.join(dir, 'webhook-key');
    writeFileSync(file, contents());
    stack = await startStack({ env: { WEBHOOK_PUBLIC_KEY_FILE: file } });
    stack.sandbox.setWebhookUrl(undefined);
  });
  afterAll(() => stack?.stop());

  it(`verifies a webhook signed with its private key (${form})`, async () => {
    const answer = await postEvent(stack, {
      uid: `keys-${form.length}`,
      event_name: 'delivery.created',
      status: 'Created',
    });
    expect(answer).toMatchObject({ status: 200, body: { status: 'stored' } });
  });
});

describe('a payload claim sent as JSON text', () => {
  let stack: Stack;
  beforeAll(async () => {
    const dir = mkdtempSync(path.join(tmpdir(), 'dg-keys-'));
    const file = path.join(dir, 'webhook.pem');
    writeFileSync(file, publicKey.export({ type: 'spki', format: 'pem' }));
    stack = await startStack({ env: { WEBHOOK_PUBLIC_KEY_FILE: file } });
    stack.sandbox.setWebhookUrl(undefined);
  });
  afterAll(() => stack?.stop());

  it('is read as the object it holds, and reaches GraphQL like any event', async () => {
    const event = { uid: 'payload-as-text', event_name: 'delivery.assigned', status: 'Assigned', driver_name: 'Mo' };
    const answer = await postEvent(stack, JSON.stringify(event));
    expect(answer).toMatchObject({ status: 200, body: { status: 'stored' } });
    const [stored] = await stack.app.services.store.eventsAfter(0, 10, { uids: ['payload-as-text'] });
    expect(stored?.payload).toEqual(event);
  });

  it('answers 400 to text that is not JSON, and to JSON that is not an object', async () => {
    expect((await postEvent(stack, 'not json {')).status).toBe(400);
    expect((await postEvent(stack, '[1,2]')).status).toBe(400);
  });
});

describe('a key change: the key file holds the old key and the new one', () => {
  let both: Stack;
  let oldOnly: Stack;
  const next = generateKeyPairSync('rsa', { modulusLength: 2048 });
  const nextPrivatePem = next.privateKey.export({ type: 'pkcs8', format: 'pem' }).toString();
  const signWith = (key: KeyObject, payload: unknown, issuer: string) =>
    new SignJWT({ payload })
      .setProtectedHeader({ alg: 'RS256', typ: 'JWT' })
      .setIssuer(issuer)
      .setIssuedAt()
      .setExpirationTime('5m')
      .sign(key);
  const post = async (stack: Stack, token: string) =>
    (
      await fetch(`${stack.app.url}/webhooks`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', authorization: `Bearer ${token}` },
        body: '{}',
      })
    ).status;

  beforeAll(async () => {
    const dir = mkdtempSync(path.join(tmpdir(), 'dg-keys-'));
    // Each block in another accepted form: the old key as an X.509 certificate, the new one as PKCS#1.
    const bundle = path.join(dir, 'bundle.pem');
    writeFileSync(
      bundle,
      `${readFileSync(new URL('certificate.pem', fixtures), 'utf8')}\n${next.publicKey.export({ type: 'pkcs1', format: 'pem' })}`,
    );
    const old = path.join(dir, 'old.pem');
    writeFileSync(old, publicKey.export({ type: 'spki', format: 'pem' }));
    both = await startStack({ env: { WEBHOOK_PUBLIC_KEY_FILE: bundle } });
    oldOnly = await startStack({ env: { WEBHOOK_PUBLIC_KEY_FILE: old } });
  });
  afterAll(async () => {
    await both?.stop();
    await oldOnly?.stop();
  });

  it('verifies events signed with either key; a file with the old key alone refuses the new one', async () => {
    const event = (n: number) => ({ uid: `rotation-${n}`, event_name: 'delivery.created', status: 'Created' });
    expect(await post(both, await signWith(privateKey, event(1), both.sandbox.issuer))).toBe(200);
    expect(await post(both, await signWith(next.privateKey, event(2), both.sandbox.issuer))).toBe(200);
    expect(await post(oldOnly, await signWith(next.privateKey, event(3), oldOnly.sandbox.issuer))).toBe(401);
    // A key in neither place is still refused.
    const stranger = generateKeyPairSync('rsa', { modulusLength: 2048 }).privateKey;
    expect(await post(both, await signWith(stranger, event(4), both.sandbox.issuer))).toBe(401);
  });

  it("keeps a delivery's events flowing when the sandbox changes its signing key mid-delivery", async () => {
    const sandbox = await startSandbox({
      privateKeyPem: privateKey.export({ type: 'pkcs8', format: 'pem' }).toString(),
      knobs: { stepMs: 0 },
    });
    const dir = mkdtempSync(path.join(tmpdir(), 'dg-keys-'));
    const bundle = path.join(dir, 'bundle.pem');
    writeFileSync(bundle, `${sandbox.publicKeyPem}${next.publicKey.export({ type: 'spki', format: 'pem' })}`);
    const stack = await startStack({
      env: {
        WEBHOOK_PUBLIC_KEY_FILE: bundle,
        UPSTREAM_URL: sandbox.url,
        PLATFORM_ID: sandbox.platformId,
        WEBHOOK_ISSUER: sandbox.issuer,
      },
    });
    sandbox.setWebhookUrl(`${stack.app.url}/webhooks`);
    try {
      const booked = await stack.gql(
        `mutation($input: DeliveryInput!) { createDelivery(input: $input) { ... on MutationCreateDeliverySuccess { data { uid } } } }`,
        { input: deliveryInput() },
        sandbox.merchants[0]!.key,
      );
      const uid = booked.data.createDelivery.data.uid as string;
      await sandbox.advance(uid);
      expect(await sandbox.useSigningKey(nextPrivatePem)).toBe(
        next.publicKey.export({ type: 'spki', format: 'pem' }).toString(),
      );
      await sandbox.advance(uid);
      await sandbox.advance(uid);
      await sandbox.idle();
      // Created and three milestones, the last two signed with the new key; nothing refused.
      expect(stack.app.receiver!.counters.accepted).toBeGreaterThanOrEqual(4);
      expect(stack.app.receiver!.counters.refusals.get(401)).toBeUndefined();
      const read = await stack.gql(
        `query($uid: ID!) { delivery(uid: $uid) { status } }`,
        { uid },
        sandbox.merchants[0]!.key,
      );
      expect(read.data.delivery.status).not.toBe('CREATED');
    } finally {
      await stack.stop();
      await sandbox.stop();
    }
  });
});

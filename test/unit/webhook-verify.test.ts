// The webhook verifier checks tokens itself, synchronously with node:crypto
// (src/webhooks/verify.ts); jose's jwtVerify, with the options the verifier had
// before, is the reference. Every token below, good or bad, gets the same
// verdict from both: accepted, or refused with jose's error code as the reason.
// The tokens are built by hand (node:crypto signs them), so that headers and
// claims jose's own signer would not produce can be tried.
import { generateKeyPairSync, createHmac, sign, type KeyObject } from 'node:crypto';
import { importSPKI, jwtVerify } from 'jose';
import { beforeAll, describe, expect, it } from 'vitest';
import { createWebhookVerifier, type WebhookVerifier } from '../../src/webhooks/verify.js';

const ISSUER = 'lastmile';
const TOLERANCE = 30;
const now = () => Math.floor(Date.now() / 1000);
const b64 = (value: unknown) =>
  Buffer.from(typeof value === 'string' ? value : JSON.stringify(value)).toString('base64url');
const raw = (bytes: Buffer | string) => Buffer.from(bytes).toString('base64url');

const pair = () => generateKeyPairSync('rsa', { modulusLength: 2048 });
const [oldKey, newKey, strangerKey] = [pair(), pair(), pair()];
const pem = (key: KeyObject) => key.export({ type: 'spki', format: 'pem' }).toString();
/** The key file of a key change: the old key and the new one. */
const trusted = [pem(oldKey.publicKey), pem(newKey.publicKey)];

const event = { uid: 'd7a0c1e2-0000-4000-8000-000000000001', event_name: 'delivery.created', status: 'Created' };
const claims = (extra: Record<string, unknown> = {}) => ({
  iss: ISSUER,
  iat: now(),
  exp: now() + 300,
  payload: event,
  ...extra,
});

/**
 * header.payload.signature, signed RS256 (whatever the header says) with `key` over the first two segments as given.
 */
function token(header: string, payload: string, key: KeyObject = newKey.privateKey): string {
  const input = `${header}.${payload}`;
  return `${input}.${sign('sha256', Buffer.from(input), key).toString('base64url')}`;
}
const jwt = (headerValue: unknown, claimsValue: unknown, key?: KeyObject) =>
  token(b64(headerValue), b64(claimsValue), key);
const good = (extra?: Record<string, unknown>) => jwt({ alg: 'RS256', typ: 'JWT' }, claims(extra));

/** What jose says: the previous verifier, key after key while the signature is what failed. */
async function joseVerdict(text: string): Promise<string> {
  const keys = await Promise.all(trusted.map((key) => importSPKI(key, 'RS256')));
  for (let index = 0; ; index += 1) {
    try {
      await jwtVerify(text, keys[index]!, {
        algorithms: ['RS256'],
        issuer: ISSUER,
        requiredClaims: ['exp'],
        clockTolerance: TOLERANCE,
      });
      return 'accepted';
    } catch (error) {
      const code = (error as { code?: string }).code;
      if (index === keys.length - 1 || code !== 'ERR_JWS_SIGNATURE_VERIFICATION_FAILED') return code ?? 'invalid token';
    }
  }
}

let verifier: WebhookVerifier;
beforeAll(async () => {
  verifier = await createWebhookVerifier(trusted, ISSUER, { clockToleranceSeconds: TOLERANCE });
});

const ourVerdict = (text: string) =>
  verifier.verify(`Bearer ${text}`).then(
    () => 'accepted',
    (error: Error) => (error.name === 'WebhookAuthError' ? error.message : `${error.name}: ${error.message}`),
  );

const signature = (text: string) => text.split('.')[2]!;
const flip = (text: string) => {
  const [h, p, s] = text.split('.') as [string, string, string];
  const bytes = Buffer.from(s, 'base64url');
  bytes[10] = bytes[10]! ^ 1;
  return `${h}.${p}.${bytes.toString('base64url')}`;
};

const tokens: Array<[string, () => string]> = [
  ['a good token, new key', () => good()],
  ['a good token, old key', () => jwt({ alg: 'RS256' }, claims(), oldKey.privateKey)],
  ['a token by a key not in the file', () => jwt({ alg: 'RS256' }, claims(), strangerKey.privateKey)],
  ['alg none', () => `${b64({ alg: 'none' })}.${b64(claims())}.`],
  [
    'alg none with a leftover signature',
    () => `${b64({ alg: 'none', typ: 'JWT' })}.${b64(claims())}.${signature(good())}`,
  ],
  [
    'HS256 keyed with the public key PEM',
    () => {
      const input = `${b64({ alg: 'HS256', typ: 'JWT' })}.${b64(claims())}`;
      return `${input}.${createHmac('sha256', trusted[1]!).update(input).digest('base64url')}`;
    },
  ],
  ['RS512 signed with the right key', () => jwt({ alg: 'RS512' }, claims())],
  ['PS256', () => jwt({ alg: 'PS256' }, claims())],
  ['an empty alg', () => jwt({ alg: '' }, claims())],
  ['no alg', () => jwt({ typ: 'JWT' }, claims())],
  ['a numeric alg', () => jwt({ alg: 256 }, claims())],
  ['a header that is not JSON', () => token(raw('{alg:RS256}'), b64(claims()))],
  ['a header that is an array', () => jwt(['RS256'], claims())],
  ['a header that is null', () => jwt(null, claims())],
  ['a header that is not UTF-8', () => token(raw(Buffer.from([0x7b, 0xff, 0x7d])), b64(claims()))],
  ['a header with a byte-order mark', () => token(raw(`\ufeff${JSON.stringify({ alg: 'RS256' })}`), b64(claims()))],
  ['an empty header segment', () => token('', b64(claims()))],
  ['crit b64 with b64 false (an unencoded payload)', () => jwt({ alg: 'RS256', b64: false, crit: ['b64'] }, claims())],
  ['crit b64 with b64 true', () => jwt({ alg: 'RS256', b64: true, crit: ['b64'] }, claims())],
  ['crit b64 twice', () => jwt({ alg: 'RS256', b64: true, crit: ['b64', 'b64'] }, claims())],
  ['crit b64 without b64', () => jwt({ alg: 'RS256', crit: ['b64'] }, claims())],
  ['crit b64 with a string b64', () => jwt({ alg: 'RS256', b64: 'false', crit: ['b64'] }, claims())],
  ['crit naming an unknown extension', () => jwt({ alg: 'RS256', exp: 1, crit: ['exp'] }, claims())],
  ['crit naming __proto__', () => jwt({ alg: 'RS256', crit: ['__proto__'] }, claims())],
  ['an empty crit', () => jwt({ alg: 'RS256', crit: [] }, claims())],
  ['crit as a string', () => jwt({ alg: 'RS256', b64: true, crit: 'b64' }, claims())],
  ['crit with an empty name', () => jwt({ alg: 'RS256', b64: true, crit: ['b64', ''] }, claims())],
  ['crit with an unknown extension before a missing b64', () => jwt({ alg: 'RS256', crit: ['zip', 'b64'] }, claims())],
  ['b64 false without crit (ignored)', () => jwt({ alg: 'RS256', b64: false }, claims())],
  [
    'a tampered payload',
    () => {
      const [h, , s] = good().split('.');
      return `${h}.${b64(claims({ payload: { ...event, status: 'Delivered' } }))}.${s}`;
    },
  ],
  ['flipped signature bits', () => flip(good())],
  ['a truncated signature', () => good().slice(0, -8)],
  ['an empty signature', () => `${good().split('.').slice(0, 2).join('.')}.`],
  [
    'a signature with its padding',
    () => {
      const t = good();
      return `${t}${'='.repeat((4 - (signature(t).length % 4)) % 4)}`;
    },
  ],
  ['a signature of one character too many', () => `${good()}A`],
  [
    'a signature with padding inside it',
    () => {
      const [h, p, s] = good().split('.') as [string, string, string];
      return `${h}.${p}.${s.slice(0, 8)}=${s.slice(9)}`;
    },
  ],
  ['a signature with too much padding', () => `${good()}===`],
  ['two segments', () => good().split('.').slice(0, 2).join('.')],
  ['four segments', () => `${good()}.${signature(good())}`],
  [
    'a payload segment that does not decode (signed as it is)',
    () => {
      const payload = b64(claims());
      // One character past a whole group of four: no base64 decodes that.
      return token(b64({ alg: 'RS256' }), payload + 'A'.repeat((5 - (payload.length % 4)) % 4));
    },
  ],
  [
    'a padded header and payload',
    () => {
      const pad = (s: string) => s + '='.repeat((4 - (s.length % 4)) % 4);
      return token(pad(b64({ alg: 'RS256' })), pad(b64(claims())));
    },
  ],
  ['claims that are an array', () => jwt({ alg: 'RS256' }, [claims()])],
  ['claims that are null', () => jwt({ alg: 'RS256' }, null)],
  ['claims that are not JSON', () => token(b64({ alg: 'RS256' }), raw('iss=lastmile'))],
  ['claims that are not UTF-8', () => token(b64({ alg: 'RS256' }), raw(Buffer.from([0x7b, 0xc3, 0x28, 0x7d])))],
  ['no exp', () => jwt({ alg: 'RS256' }, { iss: ISSUER, payload: event })],
  ['exp as a string', () => good({ exp: String(now() + 300) })],
  ['exp null', () => good({ exp: null })],
  ['exp 10 s ago (within the tolerance)', () => good({ exp: now() - 10 })],
  ['exp 45 s ago (past the tolerance)', () => good({ exp: now() - 45 })],
  ['exp an hour ago', () => good({ exp: now() - 3600 })],
  ['exp far ahead', () => good({ exp: now() + 10 * 365 * 86400 })],
  ['exp fractional, ahead', () => good({ exp: now() + 100.5 })],
  ['no iss', () => jwt({ alg: 'RS256' }, { exp: now() + 300, payload: event })],
  ['a wrong iss', () => good({ iss: 'someone-else' })],
  ['an upper-cased iss', () => good({ iss: ISSUER.toUpperCase() })],
  ['an iss with a trailing space', () => good({ iss: `${ISSUER} ` })],
  ['an iss array holding the issuer', () => good({ iss: [ISSUER] })],
  ['iss wrong and expired', () => good({ iss: 'someone-else', exp: now() - 3600 })],
  ['nbf a minute ahead', () => good({ nbf: now() + 60 })],
  ['nbf 10 s ahead (within the tolerance)', () => good({ nbf: now() + 10 })],
  ['nbf as a string', () => good({ nbf: String(now()) })],
  ['iat as a string', () => good({ iat: 'now' })],
  ['iat a day ahead (not checked without a maximum age)', () => good({ iat: now() + 86400 })],
  ['iat missing', () => jwt({ alg: 'RS256' }, { iss: ISSUER, exp: now() + 300, payload: event })],
  ['a payload claim holding JSON text', () => good({ payload: JSON.stringify(event) })],
  [
    'a claims set with __proto__',
    () =>
      token(
        b64({ alg: 'RS256' }),
        raw(`{"__proto__":{"iss":"${ISSUER}"},"exp":${now() + 300},"payload":${JSON.stringify(event)}}`),
      ),
  ],
];

describe('the webhook verifier refuses what jose refuses, for the same reason', () => {
  it.each(tokens)('%s', async (_label, make) => {
    const text = make();
    expect(await ourVerdict(text)).toBe(await joseVerdict(text));
  });

  it('covers accepted tokens and every kind of refusal', async () => {
    const verdicts = new Set(await Promise.all(tokens.map(([, make]) => joseVerdict(make()))));
    expect([...verdicts].sort()).toEqual(
      [
        'accepted',
        'ERR_JOSE_ALG_NOT_ALLOWED',
        'ERR_JOSE_NOT_SUPPORTED',
        'ERR_JWS_INVALID',
        'ERR_JWS_SIGNATURE_VERIFICATION_FAILED',
        'ERR_JWT_CLAIM_VALIDATION_FAILED',
        'ERR_JWT_EXPIRED',
        'ERR_JWT_INVALID',
      ].sort(),
    );
  });
});

describe('the webhook verifier', () => {
  it('answers within the turn of the event loop it was asked in: no trip through the thread pool', async () => {
    const text = good();
    let settled = false;
    const verdict = verifier.verify(`Bearer ${text}`).then(() => (settled = true));
    // Microtasks only: a check handed to libuv's pool (WebCrypto, as jose's is) cannot complete before the loop turns.
    for (let turn = 0; turn < 10 && !settled; turn += 1) await Promise.resolve();
    expect(settled).toBe(true);
    await verdict;
  });

  it('refuses a key file with a key shorter than 2048 bits', async () => {
    const { publicKey } = generateKeyPairSync('rsa', { modulusLength: 1024 });
    await expect(createWebhookVerifier(pem(publicKey), ISSUER)).rejects.toThrow(/2048/);
  });

  it('takes the payload claim, not the unsigned rest, and refuses a bearer that is not a token', async () => {
    expect(await verifier.verify(`Bearer ${good()}`)).toEqual(event);
    await expect(verifier.verify(undefined)).rejects.toThrow('missing bearer token');
    await expect(verifier.verify(`Basic ${good()}`)).rejects.toThrow('missing bearer token');
    await expect(verifier.verify('Bearer !!not a token!!')).rejects.toThrow('missing bearer token');
  });
});

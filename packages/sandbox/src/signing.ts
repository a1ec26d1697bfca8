// The webhook signing key (given, kept in a file, or made for the run) and the
// JWT each webhook carries: RS256, claims iss, iat, exp and `payload`.
import { createPrivateKey, createPublicKey, generateKeyPair, type KeyObject } from 'node:crypto';
import { linkSync, mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { promisify } from 'node:util';
import { SignJWT } from 'jose';
import type { SandboxWebhookEvent } from './representations.js';

/** The JWT outlives the slowest retry schedule a receiver could see. */
const JWT_LIFETIME_S = 300;

export interface SigningKeys {
  privateKey: KeyObject;
  publicKeyPem: string;
}

/** Imports the given PKCS8 PEM, or generates a fresh 2048-bit RSA pair for this run. */
export async function loadSigningKeys(privateKeyPem?: string): Promise<SigningKeys> {
  const privateKey = privateKeyPem
    ? createPrivateKey({ key: privateKeyPem, format: 'pem' })
    : (await promisify(generateKeyPair)('rsa', { modulusLength: 2048 })).privateKey;
  if (privateKey.asymmetricKeyType !== 'rsa') throw new Error('the webhook signing key must be an RSA key');
  const publicKeyPem = createPublicKey(privateKey).export({ type: 'spki', format: 'pem' }).toString();
  return { privateKey, publicKeyPem };
}

/**
 * The PKCS#8 PEM private key kept in `file`, made (2048-bit RSA) and written the
 * first time: a sandbox restarted on the same file signs with the same key, so a
 * facade that verifies with its public key keeps accepting its webhooks.
 */
export async function keptSigningKeyPem(file: string): Promise<string> {
  try {
    return readFileSync(file, 'utf8');
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code !== 'ENOENT') throw error;
  }
  const { privateKey } = await promisify(generateKeyPair)('rsa', { modulusLength: 2048 });
  const pem = privateKey.export({ type: 'pkcs8', format: 'pem' }).toString();
  mkdirSync(path.dirname(file), { recursive: true });
  // Written aside, then linked into place: two sandboxes starting at once agree on whichever link lands first.
  const aside = `${file}.${process.pid}.tmp`;
  writeFileSync(aside, pem, { mode: 0o600 });
  try {
    linkSync(aside, file);
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === 'EEXIST') return readFileSync(file, 'utf8');
    throw error;
  } finally {
    rmSync(aside, { force: true });
  }
  return pem;
}

/** The `Authorization: Bearer` token of one webhook: the event itself is the `payload` claim. */
export function signWebhook(event: SandboxWebhookEvent, issuer: string, key: KeyObject): Promise<string> {
  return new SignJWT({ payload: event })
    .setProtectedHeader({ alg: 'RS256', typ: 'JWT' })
    .setIssuer(issuer)
    .setIssuedAt()
    .setExpirationTime(`${JWT_LIFETIME_S}s`)
    .sign(key);
}

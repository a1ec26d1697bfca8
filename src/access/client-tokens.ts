// Client tokens: what a merchant hands to a browser or phone instead of its
// secret key. A token is a JWE (dir + A256GCM) under a server secret: the
// merchant key travels inside it, encrypted and authenticated, so the facade can
// make upstream calls for the token's holder while the holder cannot read the key
// from the token, forge one, or widen the uids it names.
import { createHash, hkdfSync, randomBytes } from 'node:crypto';
import { linkSync, mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { EncryptJWT, jwtDecrypt } from 'jose';

/** What a valid token grants: the merchant key it acts for and the deliveries it may read. */
export interface ClientTokenGrant {
  /** The merchant key upstream calls are made with; never shown to the holder. */
  readonly key: string;
  readonly uids: readonly string[];
  /** When the token stops being accepted (open subscriptions end then). */
  readonly expiresAt: Date;
}

export interface IssuedClientToken {
  readonly token: string;
  readonly expiresAt: Date;
  readonly uids: readonly string[];
}

/** Bounds of createClientToken's arguments (ValidationError outside them). */
export const CLIENT_TOKEN_LIMITS = { minTtlSeconds: 60, maxTtlSeconds: 86_400, maxUids: 100 } as const;

const ISSUER = 'delivery-graph';
const AUDIENCE = 'delivery-graph:client';
/**
 * Tokens read recently are remembered until they expire, so a busy subscriber's page costs one decryption, not one per
 * request.
 */
const MAX_REMEMBERED = 10_000;

/** The file a generated secret is kept in, under DATA_DIR. */
export const GENERATED_SECRET_FILE = 'client-token.secret';

interface TokenKey {
  /** Names the secret in the token's header, so that a rotated-out secret is found without trying each. */
  readonly kid: string;
  readonly key: Uint8Array;
}

/** An AES-256 key from an operator's secret (any long string): HKDF, so the secret's own format does not matter. */
function tokenKeyOf(secret: string): TokenKey {
  const key = new Uint8Array(hkdfSync('sha256', secret, 'delivery-graph', 'client-token A256GCM', 32));
  // A digest of the derived key, not of the secret: it says which key without helping anyone guess the secret.
  const kid = createHash('sha256').update(key).digest('base64url').slice(0, 12);
  return { kid, key };
}

/**
 * Whether a bearer credential is shaped like one of our tokens (a compact JWE:
 * five base64url parts, the first a header naming `dir`), as opposed to a
 * merchant key. Only the shape: whether it is valid is read() 's question.
 */
export function looksLikeClientToken(credential: string): boolean {
  if (!credential.startsWith('eyJ')) return false;
  const parts = credential.split('.');
  if (parts.length !== 5) return false;
  try {
    const header = JSON.parse(Buffer.from(parts[0]!, 'base64url').toString('utf8')) as { alg?: unknown };
    return header.alg === 'dir';
  } catch {
    return false;
  }
}

export class ClientTokens {
  readonly #keys: readonly TokenKey[];
  readonly #remembered = new Map<string, ClientTokenGrant>();

  /** `secrets[0]` encrypts new tokens; every one of them decrypts (rotation). */
  constructor(secrets: readonly string[]) {
    if (secrets.length === 0) throw new Error('ClientTokens needs at least one secret');
    this.#keys = secrets.map(tokenKeyOf);
  }

  async issue(key: string, uids: readonly string[], ttlSeconds: number): Promise<IssuedClientToken> {
    const { kid, key: secret } = this.#keys[0]!;
    const issuedAt = Math.floor(Date.now() / 1000);
    const expiresAt = new Date((issuedAt + ttlSeconds) * 1000);
    const token = await new EncryptJWT({ mk: key, uids: [...uids] })
      .setProtectedHeader({ alg: 'dir', enc: 'A256GCM', kid, typ: 'JWT' })
      .setIssuer(ISSUER)
      .setAudience(AUDIENCE)
      .setIssuedAt(issuedAt)
      .setExpirationTime(issuedAt + ttlSeconds)
      .encrypt(secret);
    return { token, expiresAt, uids };
  }

  /**
   * The grant of a token this server (or one sharing its secret) made, still unexpired; undefined for anything else.
   */
  async read(token: string): Promise<ClientTokenGrant | undefined> {
    const remembered = this.#remembered.get(token);
    if (remembered) {
      if (remembered.expiresAt.getTime() > Date.now()) return remembered;
      this.#remembered.delete(token);
      return undefined;
    }
    let grant: ClientTokenGrant;
    try {
      const { payload } = await jwtDecrypt(
        token,
        (header) => {
          const match = this.#keys.find((candidate) => candidate.kid === header.kid);
          if (!match) throw new Error('unknown key id');
          return match.key;
        },
        {
          issuer: ISSUER,
          audience: AUDIENCE,
          keyManagementAlgorithms: ['dir'],
          contentEncryptionAlgorithms: ['A256GCM'],
          requiredClaims: ['exp'],
        },
      );
      const { mk, uids, exp } = payload as { mk?: unknown; uids?: unknown; exp: number };
      if (typeof mk !== 'string' || !Array.isArray(uids) || !uids.every((uid) => typeof uid === 'string'))
        return undefined;
      grant = Object.freeze({ key: mk, uids: Object.freeze([...(uids as string[])]), expiresAt: new Date(exp * 1000) });
    } catch {
      // Tampered, expired, foreign or not a token at all: the caller only needs to know it is not accepted.
      return undefined;
    }
    if (this.#remembered.size >= MAX_REMEMBERED) this.#forgetSome();
    this.#remembered.set(token, grant);
    return grant;
  }

  /** Drops expired entries, then, if still full, the oldest (a Map keeps insertion order). */
  #forgetSome(): void {
    const now = Date.now();
    for (const [token, grant] of this.#remembered) if (grant.expiresAt.getTime() <= now) this.#remembered.delete(token);
    if (this.#remembered.size >= MAX_REMEMBERED) this.#remembered.delete(this.#remembered.keys().next().value!);
  }
}

/**
 * The secrets from CLIENT_TOKEN_SECRET, or one generated at first start and kept
 * in DATA_DIR (readable by this user only), so that tokens survive a restart.
 */
export function clientTokenSecrets(configured: readonly string[] | undefined, dataDir: string): readonly string[] {
  if (configured) return configured;
  const file = path.join(dataDir, GENERATED_SECRET_FILE);
  try {
    const kept = readFileSync(file, 'utf8').trim();
    if (kept.length >= 32) return [kept];
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code !== 'ENOENT') throw error;
  }
  mkdirSync(dataDir, { recursive: true });
  const secret = randomBytes(32).toString('base64url');
  // Written aside, then linked into place: two processes starting at once on one DATA_DIR agree on
  // whichever link lands first, and neither can read a half-written file.
  const aside = `${file}.${process.pid}.tmp`;
  writeFileSync(aside, `${secret}\n`, { mode: 0o600 });
  try {
    linkSync(aside, file);
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === 'EEXIST') return [readFileSync(file, 'utf8').trim()];
    throw error;
  } finally {
    rmSync(aside, { force: true });
  }
  return [secret];
}

// Webhooks: whether they arrive at all, the keys and issuer that verify them, and where and how they come in.
import { createPublicKey, X509Certificate, type KeyObject } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { ConfigError, extraPort, integer, oneOf, text, type Env } from './parse.js';

export interface WebhookConfig {
  readonly path: string;
  /**
   * WEBHOOK_PORT: a listener of its own for webhooks (the main port then answers them 404); undefined: the main port
   * takes them.
   */
  readonly port: number | undefined;
  /** Largest webhook JWT accepted (it travels in the Authorization header, whose limit is raised to match). */
  readonly maxTokenBytes: number;
  /** A webhook's body must arrive within this after its headers. */
  readonly bodyTimeoutMs: number;
  /**
   * WEBHOOK_CLOCK_TOLERANCE_SECONDS: a token is still accepted this long after its `exp` (and this long before its
   * `nbf`/`iat`).
   */
  readonly clockToleranceSeconds: number;
  /**
   * The keys that verify webhook JWTs, as SPKI PEM whatever form the file had
   * (several during a key change: an event verifies against any); undefined with the sandbox.
   */
  readonly publicKeyPems: readonly string[] | undefined;
  readonly publicKeyFile: string | undefined;
  readonly issuer: string | undefined;
}

export interface WebhookSettings {
  readonly webhook: WebhookConfig;
  /**
   * Whether webhooks can arrive: a key verifies them (WEBHOOK_PUBLIC_KEY_FILE, or the embedded sandbox's). Without,
   * polling alone.
   */
  readonly webhooksEnabled: boolean;
  /** WEBHOOKS=off: polling alone was chosen in so many words (no receiver, even for the embedded sandbox). */
  readonly webhooksOff: boolean;
}

/** The webhook receiver as configured; `port` is the main port, which WEBHOOK_PORT must not repeat. */
export function webhookSettings(
  env: Env,
  { production, upstreamUrl, port }: { production: boolean; upstreamUrl: string | undefined; port: number },
): WebhookSettings {
  const key = publicKeys(env, 'WEBHOOK_PUBLIC_KEY_FILE');
  const issuer = text(env, 'WEBHOOK_ISSUER');
  if (key && !issuer) throw new ConfigError('WEBHOOK_ISSUER', 'required when WEBHOOK_PUBLIC_KEY_FILE is set');
  // The embedded sandbox signs with a key the facade knows; a real upstream's key must be given.
  const webhooksEnabled = webhooksOn(env, production, key !== undefined, upstreamUrl);
  const webhook: WebhookConfig = {
    path: webhookPath(env),
    port: extraPort(env, 'WEBHOOK_PORT', [['PORT', port]]),
    maxTokenBytes: integer(env, 'WEBHOOK_MAX_TOKEN_BYTES', 262_144, 16_384, 16_777_216),
    bodyTimeoutMs: integer(env, 'WEBHOOK_BODY_TIMEOUT_MS', 10_000, 100, 600_000),
    // An hour is already far more skew than a synchronised clock has; past that, expired tokens would be a replay
    // window.
    clockToleranceSeconds: integer(env, 'WEBHOOK_CLOCK_TOLERANCE_SECONDS', 30, 0, 3600),
    publicKeyPems: key?.pems,
    publicKeyFile: key?.file,
    issuer,
  };
  return { webhook, webhooksEnabled, webhooksOff: webhooksChoice(env) === 'off' };
}

/** WEBHOOK_PATH: a path of its own, none the other endpoints answer. */
function webhookPath(env: Env): string {
  const path = text(env, 'WEBHOOK_PATH') ?? '/webhooks';
  if (!/^\/[A-Za-z0-9._~/-]*$/.test(path))
    throw new ConfigError('WEBHOOK_PATH', `expected a path starting with /, got "${path}"`);
  if (
    ['/graphql', '/health', '/ready', '/metrics', '/', '/index.html'].includes(path) ||
    path.startsWith('/tracking/') ||
    path.startsWith('/graphiql/')
  ) {
    throw new ConfigError('WEBHOOK_PATH', `${path} is taken by another endpoint`);
  }
  return path;
}

/** RS256 keys shorter than this are refused (NIST and RFC 7518 both ask for 2048 bits). */
const MIN_RSA_BITS = 2048;

/**
 * The webhook verification keys, in whichever form an account manager hands them
 * out: PEM SPKI "PUBLIC KEY", PKCS#1 "RSA PUBLIC KEY", an X.509 "CERTIFICATE"
 * (its key is used; its dates are not checked, as the upstream's signatures never
 * were), or the same as DER. A PEM file may hold several blocks, each in any of
 * these forms: during a key change, the old key and the new one, and an event
 * verifies against either. Normalized to SPKI PEM. A key that is not RSA or is
 * under 2048 bits is refused here, naming its block, rather than starting and
 * answering 401 to every webhook.
 */
function publicKeys(env: Env, name: string): { file: string; pems: string[] } | undefined {
  const file = text(env, name);
  if (file === undefined) return undefined;
  let bytes: Buffer;
  try {
    bytes = readFileSync(file);
  } catch (error) {
    throw new ConfigError(name, `cannot read ${file} (${(error as NodeJS.ErrnoException).code ?? 'error'})`);
  }
  const pem = bytes.toString('utf8');
  // createPublicKey would derive the public half of a private key; a private key has no business on this machine.
  if (/-----BEGIN [A-Z ]*PRIVATE KEY-----/.test(pem))
    throw new ConfigError(
      name,
      `${file} holds a private key; give the public key (or certificate) the account manager sent`,
    );
  const blocks = pem.includes('-----BEGIN ')
    ? [...pem.matchAll(/-----BEGIN ([A-Z0-9 ]+)-----[\s\S]*?-----END \1-----/g)].map((match) => match[0])
    : [bytes];
  if (blocks.length === 0) throw new ConfigError(name, `${file} holds no complete PEM block`);
  const pems = blocks.map((block, index) => {
    const which = blocks.length > 1 ? `block ${index + 1} of ${file}` : file;
    let key: KeyObject;
    try {
      key = typeof block === 'string' ? createPublicKey(block) : derPublicKey(block);
    } catch {
      throw new ConfigError(
        name,
        `${which} holds no public key: expected a PEM "PUBLIC KEY", "RSA PUBLIC KEY" or "CERTIFICATE" block (or the same as DER)`,
      );
    }
    if (key.asymmetricKeyType !== 'rsa')
      throw new ConfigError(
        name,
        `${which} holds a ${key.asymmetricKeyType ?? 'non-RSA'} key; webhooks are signed RS256, which needs an RSA key`,
      );
    const bits = key.asymmetricKeyDetails?.modulusLength ?? 0;
    if (bits < MIN_RSA_BITS)
      throw new ConfigError(name, `${which} holds a ${bits}-bit RSA key; at least ${MIN_RSA_BITS} bits are required`);
    return key.export({ type: 'spki', format: 'pem' }).toString();
  });
  return { file, pems: [...new Set(pems)] };
}

function derPublicKey(der: Buffer): KeyObject {
  for (const type of ['spki', 'pkcs1'] as const) {
    try {
      return createPublicKey({ key: der, format: 'der', type });
    } catch {
      // not this layout
    }
  }
  // An X.509 certificate in DER.
  return new X509Certificate(der).publicKey;
}

/** WEBHOOKS: off (polling alone, on purpose), on, or unset. */
function webhooksChoice(env: Env): 'on' | 'off' | undefined {
  return text(env, 'WEBHOOKS') === undefined ? undefined : oneOf(env, 'WEBHOOKS', ['on', 'off'] as const, 'on');
}

/**
 * Whether webhooks arrive: a key verifies them (WEBHOOK_PUBLIC_KEY_FILE, or the embedded sandbox's), unless WEBHOOKS=off.
 * A real upstream without a key in production (or with WEBHOOKS=on) stops the start: a secret forgotten in a deploy
 * would otherwise turn live tracking into polling.
 */
function webhooksOn(env: Env, production: boolean, hasKey: boolean, upstreamUrl: string | undefined): boolean {
  const choice = webhooksChoice(env);
  if (choice === 'off' && hasKey)
    throw new ConfigError('WEBHOOKS', 'off (polling alone) while WEBHOOK_PUBLIC_KEY_FILE is set: unset one of them');
  if (choice === 'off') return false;
  if (!hasKey && upstreamUrl !== undefined && (production || choice === 'on'))
    throw new ConfigError(
      'WEBHOOK_PUBLIC_KEY_FILE',
      `required ${choice === 'on' ? 'with WEBHOOKS=on' : 'in production (NODE_ENV=production)'} when UPSTREAM_URL is set: the PEM file of the upstream's webhook signing key (with WEBHOOK_ISSUER), or WEBHOOKS=off to follow deliveries by polling alone on purpose`,
    );
  return hasKey || upstreamUrl === undefined;
}

// Access: the secrets client tokens are sealed under, and what callers without an accepted key may try and cost
// before they are refused unread.
import { ConfigError, integer, text, type Env } from './parse.js';

export interface AccessSettings {
  /** Unknown merchant keys one client address may try per minute before RATE_LIMITED (0: no limit). */
  readonly authFailuresPerMinute: number;
  /**
   * Requests without a working credential refused for needing one, per client address per minute, before that address's
   * keyless requests are refused unread (0: no limit).
   */
  readonly keylessRefusalsPerMinute: number;
  /**
   * Work (milliseconds of this process's event loop, and 1 per 64 KiB read or
   * answered) the operations of callers without an accepted key may take per
   * client address per minute, before that address's requests without one are
   * refused unread (0: no limit).
   */
  readonly keylessWorkMsPerMinute: number;
  /** The same for every such caller together, in this process (0: no limit). */
  readonly keylessTotalWorkMsPerMinute: number;
  /**
   * CLIENT_TOKEN_SECRET: the secrets client tokens are encrypted under, the first
   * for new tokens, every one for reading (rotation). Undefined: one generated
   * and kept in DATA_DIR (not allowed with REDIS_URL, where every instance must
   * read every other's tokens).
   */
  readonly clientTokenSecrets: readonly string[] | undefined;
}

/** Client-token secrets (required when instances share a store) and the budgets of callers without a working key. */
export function accessSettings(env: Env, { shared }: { shared: boolean }): AccessSettings {
  return {
    authFailuresPerMinute: integer(env, 'AUTH_FAILURES_PER_MINUTE', 20, 0, 1_000_000),
    keylessRefusalsPerMinute: integer(env, 'KEYLESS_REFUSALS_PER_MINUTE', 60, 0, 1_000_000),
    keylessWorkMsPerMinute: integer(env, 'KEYLESS_WORK_MS_PER_MINUTE', 1_000, 0, 60_000_000),
    keylessTotalWorkMsPerMinute: integer(env, 'KEYLESS_TOTAL_WORK_MS_PER_MINUTE', 3_000, 0, 60_000_000),
    clientTokenSecrets: clientTokenSecrets(env, 'CLIENT_TOKEN_SECRET', shared),
  };
}

/** Shorter secrets are refused: a client token is only as strong as the secret it is encrypted under. */
export const MIN_CLIENT_TOKEN_SECRET_LENGTH = 32;

function clientTokenSecrets(env: Env, name: string, shared: boolean): string[] | undefined {
  const raw = text(env, name);
  if (raw === undefined) {
    if (shared)
      throw new ConfigError(
        name,
        'required with REDIS_URL or REDIS_SENTINELS, so that every instance accepts the client tokens any of them made (e.g. openssl rand -base64 32)',
      );
    return undefined;
  }
  const secrets = raw
    .split(',')
    .map((part) => part.trim())
    .filter(Boolean);
  // The secret itself is never echoed: only which one of the list is wrong.
  secrets.forEach((secret, index) => {
    if (secret.length < MIN_CLIENT_TOKEN_SECRET_LENGTH) {
      throw new ConfigError(
        name,
        `${secrets.length > 1 ? `secret ${index + 1} of ${secrets.length}` : 'the secret'} is ${secret.length} characters; at least ${MIN_CLIENT_TOKEN_SECRET_LENGTH} are required (e.g. openssl rand -base64 32)`,
      );
    }
  });
  if (secrets.length === 0) throw new ConfigError(name, 'lists no secret');
  return secrets;
}

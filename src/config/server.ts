// The server: which environment this is, where it listens and with how many processes, which browser origins may
// call it, what it serves at /, and its limits against clients that hold connections open.
import { normalizeOrigin, type CorsOrigins } from '../http/cors.js';
import { ConfigError, integer, oneOf, text, type Env } from './parse.js';
import { editDistance } from './unknown-settings.js';

export interface ServerSettings {
  readonly port: number;
  readonly host: string;
  readonly production: boolean;
  /** Origins whose browser pages may call the facade (CORS): `*` for any. */
  readonly corsOrigins: CorsOrigins;
  /** How long a graceful stop waits for in-flight requests before cutting connections. */
  readonly shutdownGraceMs: number;
  /** Processes serving the one port (node:cluster); more than one needs REDIS_URL. */
  readonly workers: number;
  /** Limits of the HTTP server against clients that hold connections open. */
  readonly server: {
    /** Most open connections (WebSockets included); undefined: 80 % of the process's file-descriptor limit. */
    readonly maxConnections: number | undefined;
    /**
     * Most connections one socket peer address (IPv6: its /64) may hold on the main port (0: no cap); undefined: a
     * quarter of maxConnections, none behind TRUST_PROXY.
     */
    readonly maxConnectionsPerAddress: number | undefined;
    /**
     * Slots of maxConnections kept for webhooks (WEBHOOK_PORT's own, or on a shared port past the rest, for the webhook
     * path only); undefined: an eighth of maxConnections, at most 64.
     */
    readonly webhookConnections: number | undefined;
    /** A request's headers must arrive within this. */
    readonly headersTimeoutMs: number;
    /** A whole request (headers and body) must arrive within this. */
    readonly requestTimeoutMs: number;
    /**
     * How many proxies in front of the facade append to X-Forwarded-For (0: none,
     * the client address is the socket's peer).
     */
    readonly trustProxyHops: number;
  };
  /** GET / serves the live tracking page. */
  readonly trackingPage: boolean;
}

/**
 * The listening server; `shared` says whether a store shared between processes is configured, which more than one
 * worker needs.
 */
export function serverSettings(
  env: Env,
  { production, shared }: { production: boolean; shared: boolean },
): ServerSettings {
  // Each worker has its own memory: only through Redis do they share events, idempotency keys and limits.
  const workers = integer(env, 'WORKERS', 1, 1, 256);
  if (workers > 1 && !shared)
    throw new ConfigError(
      'WORKERS',
      'more than one worker needs REDIS_URL or REDIS_SENTINELS (the workers share events, idempotency and limits through it)',
    );
  return {
    port: integer(env, 'PORT', 4000, 0, 65535),
    host: text(env, 'HOST') ?? '127.0.0.1',
    production,
    corsOrigins: corsOrigins(env, 'CORS_ORIGINS'),
    shutdownGraceMs: integer(env, 'SHUTDOWN_GRACE_MS', 10_000, 0, 600_000),
    workers,
    server: connectionLimits(env),
    trackingPage: oneOf(env, 'TRACKING_PAGE', ['true', 'false'] as const, 'true') === 'true',
  };
}

function connectionLimits(env: Env): ServerSettings['server'] {
  const maxConnections =
    text(env, 'MAX_CONNECTIONS') === undefined ? undefined : integer(env, 'MAX_CONNECTIONS', 0, 16, 10_000_000);
  return {
    maxConnections,
    maxConnectionsPerAddress:
      text(env, 'MAX_CONNECTIONS_PER_ADDRESS') === undefined
        ? undefined
        : integer(env, 'MAX_CONNECTIONS_PER_ADDRESS', 0, 0, 10_000_000),
    webhookConnections: webhookConnections(env, 'WEBHOOK_CONNECTIONS', maxConnections),
    headersTimeoutMs: integer(env, 'HEADERS_TIMEOUT_MS', 10_000, 100, 600_000),
    requestTimeoutMs: integer(env, 'REQUEST_TIMEOUT_MS', 30_000, 100, 3_600_000),
    trustProxyHops: proxyHops(env, 'TRUST_PROXY'),
  };
}

const NODE_ENVS = ['production', 'development', 'test'] as const;
/** Values seen in the wild for each of NODE_ENVS, to name the one meant. */
const NODE_ENV_ALIASES: Record<string, (typeof NODE_ENVS)[number]> = {
  prod: 'production',
  prd: 'production',
  live: 'production',
  stage: 'production',
  staging: 'production',
  dev: 'development',
  develop: 'development',
  local: 'development',
  testing: 'test',
  ci: 'test',
};

/**
 * NODE_ENV, one of NODE_ENVS (unset: development). Any other value stops the start naming the closest: a misspelled
 * production would otherwise serve GraphiQL, introspection and /metrics, with none of production's checks.
 */
export function nodeEnv(env: Env): (typeof NODE_ENVS)[number] {
  const raw = text(env, 'NODE_ENV');
  if (raw === undefined) return 'development';
  if ((NODE_ENVS as readonly string[]).includes(raw)) return raw as (typeof NODE_ENVS)[number];
  const lower = raw.toLowerCase();
  const closest =
    NODE_ENVS.find((name) => name === lower) ??
    NODE_ENV_ALIASES[lower] ??
    NODE_ENVS.find((name) => name.startsWith(lower) || lower.startsWith(name)) ??
    [...NODE_ENVS].sort((a, b) => editDistance(lower, a) - editDistance(lower, b))[0]!;
  throw new ConfigError(
    'NODE_ENV',
    `expected production, development or test, got "${raw}"; did you mean NODE_ENV=${closest}?`,
  );
}

/** Slots kept for webhooks: at most half of MAX_CONNECTIONS, so that the rest stay for everyone else. */
function webhookConnections(env: Env, name: string, maxConnections: number | undefined): number | undefined {
  if (text(env, name) === undefined) return undefined;
  const slots = integer(env, name, 0, 0, 10_000_000);
  if (maxConnections !== undefined && slots > maxConnections / 2)
    throw new ConfigError(name, `${slots} is more than half of MAX_CONNECTIONS (${maxConnections})`);
  return slots;
}

/** false/0: no proxy; true: one; N: that many proxies append to X-Forwarded-For. */
function proxyHops(env: Env, name: string): number {
  const raw = text(env, name)?.toLowerCase();
  if (raw === undefined || raw === 'false') return 0;
  if (raw === 'true') return 1;
  if (/^\d{1,2}$/.test(raw)) return Number(raw);
  throw new ConfigError(name, `expected false, true or a number of proxies, got "${raw}"`);
}

function corsOrigins(env: Env, name: string): CorsOrigins {
  const raw = text(env, name);
  if (raw === undefined || raw === '*') return '*';
  const origins = new Set<string>();
  for (const entry of raw
    .split(',')
    .map((part) => part.trim())
    .filter(Boolean)) {
    if (entry === '*') throw new ConfigError(name, '* stands alone (any origin); it cannot be listed with others');
    const origin = normalizeOrigin(entry);
    if (!origin) throw new ConfigError(name, `"${entry}" is not an origin (scheme://host[:port], no path)`);
    origins.add(origin);
  }
  if (origins.size === 0) throw new ConfigError(name, 'lists no origin');
  return origins;
}

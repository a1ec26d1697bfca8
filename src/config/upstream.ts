// The upstream the facade fronts: a real one (UPSTREAM_URL, PLATFORM_ID and how it reads amounts and reads by uid),
// or the embedded sandbox and where it listens.
import { DEFAULT_STEP_MS, isLoopbackHost, MIN_CONTROL_TOKEN_LENGTH } from '@delivery-graph/sandbox';
import { DEFAULT_REFUSAL_MEMORY_MS } from '../upstream/known-keys.js';
import { ConfigError, fraction, httpUrlOf, integer, oneOf, text, type Env } from './parse.js';

export const AMOUNT_UNITS = ['cents', 'major'] as const;
export type AmountUnit = (typeof AMOUNT_UNITS)[number];
export const READ_SCOPES = ['platform', 'key'] as const;
/**
 * Whose deliveries a read by uid answers 200 for: any of the platform's (as the upstream's document reads), or only the
 * key's merchant's.
 */
export type ReadScope = (typeof READ_SCOPES)[number];

/** UPSTREAM_URL's one value that is not a URL: the embedded sandbox, asked for in so many words. */
export const SANDBOX_UPSTREAM = 'sandbox';
/** Logged at every production start on the simulator, so that a collector sees it too (the banner goes to a person). */
export const SIMULATOR_IN_PRODUCTION = `the upstream is the embedded sandbox (UPSTREAM_URL=${SANDBOX_UPSTREAM}), a simulator: nothing is really booked or delivered`;

export interface UpstreamConfig {
  /** Base URL ending in /api/v1; undefined means "start the embedded sandbox". */
  readonly url: string | undefined;
  readonly platformId: string | undefined;
  readonly timeoutMs: number;
  /** UPSTREAM_AMOUNT_UNIT: the unit request `tip` and `package_value` are sent in. */
  readonly amountUnit: AmountUnit;
  /**
   * UPSTREAM_ITEM_PRICE_UNIT: the unit item prices are sent in and read back in (UPSTREAM_AMOUNT_UNIT's unless set).
   */
  readonly itemPriceUnit: AmountUnit;
  /** UPSTREAM_QUOTE_AMOUNT_UNIT: the unit a quote's `delivery_fee` and `tip` are read in. */
  readonly quoteAmountUnit: AmountUnit;
  /**
   * UPSTREAM_READ_SCOPE: `platform`, a read's 200 says only that the delivery is
   * the platform's, so it proves no merchant owns it; `key`, the upstream answers
   * a read 404 for any delivery not the key's merchant's (src/access/owners.ts).
   */
  readonly readScope: ReadScope;
  /**
   * Time between background checks of the upstream's health (reported by /ready and /metrics, never used to pull the
   * instance).
   */
  readonly healthCheckMs: number;
  /** Most sockets kept open to the upstream origin. */
  readonly connections: number;
  /**
   * KEY_REFUSAL_MEMORY_MS: how long a key the upstream refused (401) is answered UNAUTHENTICATED without asking again.
   */
  readonly keyRefusalMemoryMs: number;
  /** Larger upstream bodies are refused as UPSTREAM_ERROR instead of buffered. */
  readonly maxResponseBytes: number;
  /** The circuit breaker of each endpoint group. */
  readonly breaker: {
    /** Calls in the rolling 10 s window before the error rate can open the circuit. */
    readonly volumeThreshold: number;
    /** Percentage of failed calls above which the circuit opens (4xx answers are not failures). */
    readonly errorPercent: number;
    /** How long an open circuit fails fast before one trial call is let through. */
    readonly resetMs: number;
  };
}

export interface SandboxConfig {
  /** Port of the embedded sandbox when UPSTREAM_URL is unset (0: any free port). */
  readonly port: number;
  /** SANDBOX_HOST: the address it listens on, loopback unless told. */
  readonly host: string;
  /** SANDBOX_CONTROL_TOKEN: what its /sandbox control routes need (required beyond loopback). Never logged. */
  readonly controlToken: string | undefined;
  /** Time between simulated lifecycle milestones. */
  readonly stepMs: number;
  /** Share of deliveries that fail or are canceled by the provider after pickup, then come back. */
  readonly returnRate: number;
}

export interface UpstreamSettings {
  readonly upstream: UpstreamConfig;
  readonly sandbox: SandboxConfig;
}

/** The upstream, or the embedded sandbox with where it listens. */
export function upstreamSettings(env: Env, production: boolean): UpstreamSettings {
  const { url, platformId } = upstreamAddress(env, production);
  const amountUnit = oneOf(env, 'UPSTREAM_AMOUNT_UNIT', AMOUNT_UNITS, 'cents');
  const upstream: UpstreamConfig = {
    url,
    platformId,
    timeoutMs: integer(env, 'UPSTREAM_TIMEOUT_MS', 10_000, 100, 600_000),
    amountUnit,
    // Its own setting: an upstream may take tips in cents and item prices in major units (the document states no unit
    // for items).
    itemPriceUnit: oneOf(env, 'UPSTREAM_ITEM_PRICE_UNIT', AMOUNT_UNITS, amountUnit),
    // The document gives the quote's delivery_fee and tip as numbers with no unit; major is how they have always been
    // read.
    quoteAmountUnit: oneOf(env, 'UPSTREAM_QUOTE_AMOUNT_UNIT', AMOUNT_UNITS, 'major'),
    // The document's 404 reads "no delivery with this uid belongs to the platform": key scope is an operator's
    // knowing choice.
    readScope: oneOf(env, 'UPSTREAM_READ_SCOPE', READ_SCOPES, 'platform'),
    healthCheckMs: integer(env, 'UPSTREAM_CHECK_INTERVAL_MS', 10_000, 100, 3_600_000),
    connections: integer(env, 'UPSTREAM_CONNECTIONS', 64, 1, 10_000),
    keyRefusalMemoryMs: integer(env, 'KEY_REFUSAL_MEMORY_MS', DEFAULT_REFUSAL_MEMORY_MS, 0, 60_000),
    maxResponseBytes: integer(env, 'UPSTREAM_MAX_RESPONSE_BYTES', 1_048_576, 1024, 1_073_741_824),
    breaker: {
      volumeThreshold: integer(env, 'BREAKER_VOLUME_THRESHOLD', 20, 1, 1_000_000),
      errorPercent: integer(env, 'BREAKER_ERROR_PERCENT', 50, 1, 100),
      resetMs: integer(env, 'BREAKER_RESET_MS', 5000, 10, 3_600_000),
    },
  };
  const sandbox: SandboxConfig = {
    port: integer(env, 'SANDBOX_PORT', 4010, 0, 65535),
    ...sandboxControl(env, url === undefined),
    stepMs: integer(env, 'SANDBOX_STEP_MS', DEFAULT_STEP_MS, 0, 3_600_000),
    returnRate: fraction(env, 'SANDBOX_RETURN_RATE', 0.1),
  };
  return { upstream, sandbox };
}

/** UPSTREAM_URL and PLATFORM_ID; no URL means the embedded sandbox. */
function upstreamAddress(env: Env, production: boolean): { url: string | undefined; platformId: string | undefined } {
  // The simulator by choice (UPSTREAM_URL=sandbox), or by default outside production only: a production
  // start without an upstream would book on a simulator while every probe stays green.
  const sandboxAsked = text(env, 'UPSTREAM_URL')?.toLowerCase() === SANDBOX_UPSTREAM;
  const url = sandboxAsked ? undefined : upstreamBaseUrl(env, 'UPSTREAM_URL');
  if (production && url === undefined && !sandboxAsked) {
    throw new ConfigError(
      'UPSTREAM_URL',
      `required in production (NODE_ENV=production): the upstream's base URL ending in /api/v1, or UPSTREAM_URL=${SANDBOX_UPSTREAM} to run the embedded simulator on purpose`,
    );
  }
  const platformId = text(env, 'PLATFORM_ID');
  if (url && !platformId) throw new ConfigError('PLATFORM_ID', 'required when UPSTREAM_URL is set');
  if (platformId && !/^[A-Za-z0-9._~-]+$/.test(platformId))
    throw new ConfigError('PLATFORM_ID', 'must be a single URL path segment');
  return { url, platformId };
}

/** The upstream base URL: no credentials, ending in /api/v1. */
function upstreamBaseUrl(env: Env, name: string): string | undefined {
  const url = httpUrlOf(env, name);
  if (!url) return undefined;
  if (url.username || url.password) throw new ConfigError(name, 'must not carry credentials');
  const base = url.href.replace(/\/+$/, '');
  if (!base.endsWith('/api/v1')) throw new ConfigError(name, 'must end in /api/v1');
  return base;
}

/** Where the embedded sandbox listens, and the token its control routes need: one is required beyond loopback. */
function sandboxControl(env: Env, embedded: boolean): { host: string; controlToken: string | undefined } {
  const host = text(env, 'SANDBOX_HOST') ?? '127.0.0.1';
  const controlToken = text(env, 'SANDBOX_CONTROL_TOKEN');
  // The token itself is never echoed.
  if (controlToken !== undefined && (/\s/.test(controlToken) || controlToken.length < MIN_CONTROL_TOKEN_LENGTH))
    throw new ConfigError(
      'SANDBOX_CONTROL_TOKEN',
      `must be ${MIN_CONTROL_TOKEN_LENGTH} characters or more, without whitespace (e.g. openssl rand -hex 24)`,
    );
  if (embedded && controlToken === undefined && !isLoopbackHost(host))
    throw new ConfigError(
      'SANDBOX_CONTROL_TOKEN',
      `required with SANDBOX_HOST=${host}: beyond loopback the embedded sandbox's control routes (its knobs, where its webhooks go, its merchant keys) need a token`,
    );
  return { host, controlToken };
}

// Configuration is read here, once, from the environment; nothing else in the
// code base reads process.env. A bad value stops start-up with one line that
// names the variable and says what is wrong with it.
import { createPublicKey, X509Certificate, type KeyObject } from 'node:crypto';
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { normalizeOrigin, type CorsOrigins } from './http/cors.js';
import {
  CONTROL_TOKEN_HEADER,
  DEFAULT_STEP_MS,
  isLoopbackHost,
  MIN_CONTROL_TOKEN_LENGTH,
} from '@delivery-graph/sandbox';
import { DEFAULT_REFUSAL_MEMORY_MS } from './upstream/known-keys.js';

export const AMOUNT_UNITS = ['cents', 'major'] as const;
export type AmountUnit = (typeof AMOUNT_UNITS)[number];
export const READ_SCOPES = ['platform', 'key'] as const;
/**
 * Whose deliveries a read by uid answers 200 for: any of the platform's (as the upstream's document reads), or only the
 * key's merchant's.
 */
export type ReadScope = (typeof READ_SCOPES)[number];
export type LogLevel = 'fatal' | 'error' | 'warn' | 'info' | 'debug' | 'trace' | 'silent';
/** pretty: readable, coloured lines for a person at a terminal; json: one JSON object a line, for machines. */
export type LogFormat = 'pretty' | 'json';

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

export interface Config {
  readonly port: number;
  readonly host: string;
  readonly production: boolean;
  readonly logLevel: LogLevel;
  readonly logFormat: LogFormat;
  readonly dataDir: string;
  readonly redisUrl: string | undefined;
  /**
   * REDIS_SENTINELS and REDIS_SENTINEL_NAME (instead of REDIS_URL): the Sentinels that say which server is the primary
   * now.
   */
  readonly redisSentinel: RedisSentinelConfig | undefined;
  /**
   * REDIS_MIN_REPLICAS_ACK: replicas that must confirm a stored batch before its webhooks are acknowledged (undefined:
   * 1 when the primary has any).
   */
  readonly redisMinReplicasAck: number | undefined;
  /** REDIS_REPLICA_ACK_TIMEOUT_MS: how long a batch waits for them before its webhooks are answered 503. */
  readonly redisReplicaAckTimeoutMs: number;
  /** Origins whose browser pages may call the facade (CORS): `*` for any. */
  readonly corsOrigins: CorsOrigins;
  readonly upstream: UpstreamConfig;
  readonly webhook: WebhookConfig;
  readonly graphql: {
    /** Longest `deliveries(uids:)` list accepted. */
    readonly maxBatchSize: number;
    /** Upstream reads one request runs at once. */
    readonly batchConcurrency: number;
    /** Introspection and GraphiQL: off in production unless GRAPHQL_INTROSPECTION=true. */
    readonly introspection: boolean;
    /**
     * Federation's `_service { sdl }`: on outside production; in production as introspection is, unless FEDERATION_SDL
     * says.
     */
    readonly federationSdl: boolean;
    /** Larger GraphQL request bodies are refused with 413. */
    readonly maxBodyBytes: number;
    /** When set, only these operations run (id, usually the sha256 of the text → document text). */
    readonly persistedOperations:
      { readonly file: string; readonly operations: Readonly<Record<string, string>> } | undefined;
    /**
     * Automatic persisted queries remembered by this process (an LRU; shared through Redis too when REDIS_URL is set);
     * 0: APQ off.
     */
    readonly apqMaxEntries: number;
    /** Operations one merchant key may run per minute (a token bucket of that size); 0: no limit. */
    readonly rateLimitPerMinute: number;
    /** Operations one client token may run per minute, on its own bucket (never its merchant's); 0: no limit. */
    readonly clientTokenRateLimitPerMinute: number;
    /** Operations all client tokens together may run per minute from one client address; 0: no limit. */
    readonly clientTokenAddressRateLimitPerMinute: number;
    /** Longest query text parsed, comments included (DOCUMENT_TOO_LARGE above). */
    readonly maxDocumentBytes: number;
    /** Most heap the shared cache of parsed, validated and compiled documents holds (0: nothing kept). */
    readonly cacheBytes: number;
    /**
     * Most fields (fragments spread, aliases apart) a plan may resolve to be compiled by graphql-jit; larger ones run
     * on graphql-js.
     */
    readonly compileMaxFields: number;
    /** graphql-jit compiles per process and minute, a third of them at most for one merchant key (0: none). */
    readonly compilesPerMinute: number;
    /** Larger GraphQL responses are replaced by an error. */
    readonly maxResponseBytes: number;
  };
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
  /** How long stored events, their de-duplication entries and ownership records are kept. */
  readonly eventRetentionMs: number;
  /**
   * CLIENT_TOKEN_SECRET: the secrets client tokens are encrypted under, the first
   * for new tokens, every one for reading (rotation). Undefined: one generated
   * and kept in DATA_DIR (not allowed with REDIS_URL, where every instance must
   * read every other's tokens).
   */
  readonly clientTokenSecrets: readonly string[] | undefined;
  /** How long idempotency keys are kept. */
  readonly idempotencyRetentionMs: number;
  readonly realtime: {
    /** Events one subscriber may have waiting (location updates coalesce) before it is cut off. */
    readonly maxPendingEvents: number;
    /** Operations one WebSocket may run at once. */
    readonly maxSubscriptionsPerSocket: number;
    /**
     * SUBSCRIPTIONS_PER_KEY: subscriptions open at once per merchant key on this instance, its client tokens' included
     * (0: no cap).
     */
    readonly subscriptionsPerKey: number;
    /** SUBSCRIPTIONS_PER_CLIENT_TOKEN: subscriptions open at once per client token on this instance (0: no cap). */
    readonly subscriptionsPerClientToken: number;
    /**
     * SUBSCRIPTIONS_PER_ADDRESS: subscriptions of client tokens and keys the upstream has not accepted, open at once
     * per client address on this instance (0: no cap).
     */
    readonly subscriptionsPerAddress: number;
    /**
     * Upstream access checks one subscription may make per minute for the events
     * it meets (deliveries with no owner record); past them, and past the key's
     * RATE_LIMIT_PER_MINUTE that each check draws on, those events are skipped.
     */
    readonly accessChecksPerMinute: number;
    /**
     * RECONCILE_INTERVAL_MS: a delivery followed by a live subscriber of this
     * instance is read from the upstream when no event has come for this long
     * (0: never). Shorter by default when no webhooks can arrive.
     */
    readonly reconcileIntervalMs: number;
    /**
     * RECONCILE_MAX_READS_PER_SECOND: most reconciliation reads this instance makes per second, whatever it follows.
     */
    readonly reconcileMaxReadsPerSecond: number;
    /**
     * RECONCILE_UNFOLLOWED_INTERVAL_MS: each unfinished delivery the facade knows
     * is read this often though nobody follows it (0: never). Ten RECONCILE_INTERVAL_MS by default.
     */
    readonly reconcileUnfollowedIntervalMs: number;
    /**
     * RECONCILE_UNFOLLOWED_WINDOW: only deliveries the facade recorded (booked, read) this recently are read
     * unfollowed; at most EVENT_RETENTION.
     */
    readonly reconcileUnfollowedWindowMs: number;
    /**
     * FINALITY_GRACE_MS: a cancel or failure with no evidence of pickup stays open
     * to later evidence (a return, a second attempt) this long; then a read that
     * still says so makes it final.
     */
    readonly finalityGraceMs: number;
    /**
     * KEY_RECONFIRM_INTERVAL_MS: the key of every open subscription of this
     * instance is re-confirmed with the upstream at least this often (one call
     * per key, skipped when another call proved it within the interval).
     */
    readonly keyReconfirmIntervalMs: number;
  };
  /**
   * Whether webhooks can arrive: a key verifies them (WEBHOOK_PUBLIC_KEY_FILE, or the embedded sandbox's). Without,
   * polling alone.
   */
  readonly webhooksEnabled: boolean;
  /** WEBHOOKS=off: polling alone was chosen in so many words (no receiver, even for the embedded sandbox). */
  readonly webhooksOff: boolean;
  /** GET /metrics (Prometheus text format). */
  readonly metrics: boolean;
  /** Where GET /metrics is answered, and who may read it. */
  readonly metricsAccess: {
    /** METRICS_PORT: a listener of its own, answering /metrics only; undefined: none. */
    readonly port: number | undefined;
    /** METRICS_HOST: the address that listener binds (loopback unless told). */
    readonly host: string;
    /**
     * METRICS_TOKEN: when set, every /metrics request, on any port, must carry it as `Authorization: Bearer <token>`.
     */
    readonly token: string | undefined;
    /**
     * The main port answers /metrics: always with a token; without one, outside production and without METRICS_PORT.
     */
    readonly onMainPort: boolean;
  };
  /** GET / serves the live tracking page. */
  readonly trackingPage: boolean;
  /**
   * OpenTelemetry tracing, configured by the standard OTEL_* variables: on when
   * OTEL_TRACES_EXPORTER names an exporter or an OTLP endpoint is set (and
   * OTEL_SDK_DISABLED is not true); when off, no SDK is loaded.
   */
  readonly tracing: {
    readonly enabled: boolean;
    /** OTEL_TRACES_EXPORTER: OTLP over HTTP, or the console (stdout). */
    readonly exporter: 'otlp' | 'console';
    /** Where spans are POSTed (OTLP over HTTP). */
    readonly tracesUrl: string;
    /**
     * OTEL_EXPORTER_OTLP_HEADERS, then OTEL_EXPORTER_OTLP_TRACES_HEADERS (e.g. a collector's API key: never logged).
     */
    readonly headers: Readonly<Record<string, string>>;
    readonly serviceName: string;
    /** OTEL_RESOURCE_ATTRIBUTES. */
    readonly resourceAttributes: Readonly<Record<string, string>>;
    /** OTEL_TRACES_SAMPLER and OTEL_TRACES_SAMPLER_ARG (a ratio for the *traceidratio samplers). */
    readonly sampler: { readonly name: TraceSampler; readonly ratio: number };
  };
  readonly sandbox: {
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
  };
}

export const TRACE_SAMPLERS = [
  'always_on',
  'always_off',
  'traceidratio',
  'parentbased_always_on',
  'parentbased_always_off',
  'parentbased_traceidratio',
] as const;
export type TraceSampler = (typeof TRACE_SAMPLERS)[number];

export interface RedisSentinelConfig {
  sentinels: Array<{ host: string; port: number }>;
  /** The monitored primary's name (`sentinel monitor <name> …`). */
  name: string;
  /** REDIS_PASSWORD (and REDIS_USERNAME): for the primary and replicas. */
  password: string | undefined;
  username: string | undefined;
  /** REDIS_SENTINEL_PASSWORD: for the Sentinels themselves. */
  sentinelPassword: string | undefined;
  /** REDIS_TLS: TLS to the primary and replicas; REDIS_SENTINEL_TLS: to the Sentinels. */
  tls: boolean;
  sentinelTls: boolean;
}

/** UPSTREAM_URL's one value that is not a URL: the embedded sandbox, asked for in so many words. */
export const SANDBOX_UPSTREAM = 'sandbox';
/** Logged at every production start on the simulator, so that a collector sees it too (the banner goes to a person). */
export const SIMULATOR_IN_PRODUCTION = `the upstream is the embedded sandbox (UPSTREAM_URL=${SANDBOX_UPSTREAM}), a simulator: nothing is really booked or delivered`;

export class ConfigError extends Error {
  override name = 'ConfigError';
  constructor(
    readonly variable: string,
    problem: string,
  ) {
    super(`${variable}: ${problem}`);
  }
}

/** Every variable loadConfig reads, with the one-line help `--help` prints. */
export const CONFIG_VARIABLES: ReadonlyArray<{ name: string; help: string; default: string }> = [
  { name: 'PORT', help: 'port the facade listens on (0: any free port)', default: '4000' },
  { name: 'HOST', help: 'address the facade listens on', default: '127.0.0.1' },
  {
    name: 'UPSTREAM_URL',
    help: 'upstream base URL ending in /api/v1, or sandbox for the embedded simulator (nothing is really booked); required in production, where unset stops start-up',
    default: 'unset: the embedded sandbox (outside production)',
  },
  {
    name: 'PLATFORM_ID',
    help: 'platform identifier in platform-group paths (required with UPSTREAM_URL)',
    default: "the sandbox's",
  },
  {
    name: 'WEBHOOK_PUBLIC_KEY_FILE',
    help: 'RSA public key (2048 bits or more) that verifies webhook JWTs: PEM "PUBLIC KEY", "RSA PUBLIC KEY" or "CERTIFICATE", or DER; a PEM file may hold several (a key change: an event verifies against any)',
    default: "the sandbox's",
  },
  { name: 'WEBHOOK_ISSUER', help: 'required iss claim of webhook JWTs', default: "the sandbox's" },
  {
    name: 'WEBHOOKS',
    help: 'off: no webhook receiver, subscriptions follow the upstream by polling alone (every RECONCILE_INTERVAL_MS), said on purpose; on: webhooks, so WEBHOOK_PUBLIC_KEY_FILE is required with UPSTREAM_URL. Unset: on in production; elsewhere on when a key is known, else polling alone with a warning',
    default: 'unset',
  },
  { name: 'WEBHOOK_PATH', help: 'path of the webhook receiver', default: '/webhooks' },
  {
    name: 'WEBHOOK_PORT',
    help: 'a port of its own for webhooks, on HOST, with WEBHOOK_CONNECTIONS slots no client of PORT can take (the main port then answers the webhook path 404); unset: webhooks come in on PORT',
    default: 'unset',
  },
  {
    name: 'WEBHOOK_MAX_TOKEN_BYTES',
    help: 'largest webhook JWT accepted (it travels in the Authorization header; the head limit of WEBHOOK_PATH requests is raised to match, every other request keeps 16 KiB, whatever came before it on its connection)',
    default: '262144',
  },
  {
    name: 'WEBHOOK_BODY_TIMEOUT_MS',
    help: "a webhook's body must arrive within this after its headers",
    default: '10000',
  },
  {
    name: 'WEBHOOK_CLOCK_TOLERANCE_SECONDS',
    help: 'seconds a webhook JWT is still accepted after its exp (and before its nbf/iat), for clock skew between the upstream and this host; 0: none',
    default: '30',
  },
  {
    name: 'DATA_DIR',
    help: "directory of the embedded SQLite store, and of the embedded sandbox's world and signing key (DATA_DIR/sandbox)",
    default: './data',
  },
  { name: 'UPSTREAM_TIMEOUT_MS', help: 'budget of one upstream call, retries included', default: '10000' },
  {
    name: 'UPSTREAM_AMOUNT_UNIT',
    help: 'unit the upstream expects for request tip and package_value (and item price unless UPSTREAM_ITEM_PRICE_UNIT is set): cents or major',
    default: 'cents',
  },
  {
    name: 'UPSTREAM_READ_SCOPE',
    help: "whose deliveries the upstream's read by uid answers: platform (any of the platform's, as its document reads: a 200 then proves no merchant owns one) or key (only the key's merchant's: the upstream decides who sees what)",
    default: 'platform',
  },
  {
    name: 'UPSTREAM_ITEM_PRICE_UNIT',
    help: 'unit the upstream expects for request item price, and gives it back in on reads: cents or major',
    default: "UPSTREAM_AMOUNT_UNIT's",
  },
  {
    name: 'UPSTREAM_QUOTE_AMOUNT_UNIT',
    help: "unit of the quote answer's delivery_fee and tip: major (read as they are) or cents (divided by 100)",
    default: 'major',
  },
  {
    name: 'UPSTREAM_CHECK_INTERVAL_MS',
    help: "time between background checks of the upstream's health, reported by /ready and /metrics (readiness never depends on it)",
    default: '10000',
  },
  { name: 'UPSTREAM_CONNECTIONS', help: 'most keep-alive sockets to the upstream', default: '64' },
  { name: 'UPSTREAM_MAX_RESPONSE_BYTES', help: 'largest upstream response body accepted', default: '1048576' },
  {
    name: 'BREAKER_VOLUME_THRESHOLD',
    help: 'upstream calls per endpoint group in a rolling 10 s window before the circuit may open',
    default: '20',
  },
  {
    name: 'BREAKER_ERROR_PERCENT',
    help: 'percentage of failed upstream calls (4xx answers excluded) above which the circuit opens',
    default: '50',
  },
  {
    name: 'BREAKER_RESET_MS',
    help: 'how long an open circuit fails fast before one trial call is let through',
    default: '5000',
  },
  {
    name: 'CORS_ORIGINS',
    help: 'comma-separated origins whose browser pages may call the facade (e.g. https://shop.example), or * for any',
    default: '*',
  },
  {
    name: 'REDIS_URL',
    help: 'share events, dedup and fan-out between instances through Redis',
    default: 'unset: embedded',
  },
  {
    name: 'REDIS_SENTINELS',
    help: 'instead of REDIS_URL: comma-separated host:port of Redis Sentinels, which name the primary (and a new one after a failover)',
    default: 'unset',
  },
  {
    name: 'REDIS_SENTINEL_NAME',
    help: 'the name the Sentinels monitor the primary under; required with REDIS_SENTINELS',
    default: 'unset',
  },
  {
    name: 'REDIS_PASSWORD',
    help: 'with REDIS_SENTINELS: the password of the primary and replicas (with REDIS_URL it goes in the URL)',
    default: 'unset',
  },
  {
    name: 'REDIS_USERNAME',
    help: 'with REDIS_SENTINELS: the ACL user of the primary and replicas',
    default: 'unset: default user',
  },
  {
    name: 'REDIS_SENTINEL_PASSWORD',
    help: 'with REDIS_SENTINELS: the password of the Sentinels themselves',
    default: 'unset',
  },
  { name: 'REDIS_TLS', help: 'with REDIS_SENTINELS: true for TLS to the primary and replicas', default: 'false' },
  { name: 'REDIS_SENTINEL_TLS', help: 'with REDIS_SENTINELS: true for TLS to the Sentinels', default: 'false' },
  {
    name: 'REDIS_MIN_REPLICAS_ACK',
    help: 'replicas that must confirm each stored batch of webhooks (Redis WAIT) before they are acknowledged; otherwise 503 and the upstream retries',
    default: '1 when the primary has a replica, else 0',
  },
  {
    name: 'REDIS_REPLICA_ACK_TIMEOUT_MS',
    help: 'how long a stored batch waits for REDIS_MIN_REPLICAS_ACK replicas before its webhooks are answered 503',
    default: '1000',
  },
  { name: 'MAX_BATCH_SIZE', help: 'longest deliveries(uids:) list', default: '100' },
  { name: 'BATCH_CONCURRENCY', help: 'upstream reads one GraphQL request runs at once', default: '64' },
  {
    name: 'MAX_CONNECTIONS',
    help: 'most open connections over every port, WebSockets included (the next are refused 503 at once)',
    default: "80 % of the process's file-descriptor limit",
  },
  {
    name: 'MAX_CONNECTIONS_PER_ADDRESS',
    help: "most connections one socket peer address (IPv6: its /64) may hold on PORT; the next are refused 429 at once (0: no cap; behind a proxy every connection is the proxy's)",
    default: 'a quarter of MAX_CONNECTIONS; 0 with TRUST_PROXY',
  },
  {
    name: 'WEBHOOK_CONNECTIONS',
    help: 'connection slots of MAX_CONNECTIONS kept for webhooks: with WEBHOOK_PORT, only its listener takes them; on a shared PORT, they take webhook requests only (one per connection) once every other slot is taken',
    default: 'an eighth of MAX_CONNECTIONS, at most 64',
  },
  {
    name: 'HEADERS_TIMEOUT_MS',
    help: "a request's head (request line and headers) must arrive within this, a new connection's from its start (slow clients are cut off with 408)",
    default: '10000',
  },
  { name: 'REQUEST_TIMEOUT_MS', help: 'a whole request, body included, must arrive within this', default: '30000' },
  {
    name: 'TRUST_PROXY',
    help: 'how many proxies in front append to X-Forwarded-For (false or 0: use the socket address; true: 1)',
    default: 'false',
  },
  {
    name: 'KEY_REFUSAL_MEMORY_MS',
    help: 'how long a merchant key the upstream refused (401) is answered UNAUTHENTICATED without asking the upstream again; a try after it costs the client address another of AUTH_FAILURES_PER_MINUTE (0 to 60000)',
    default: '5000',
  },
  {
    name: 'AUTH_FAILURES_PER_MINUTE',
    help: 'unknown merchant keys one client address may try per minute before RATE_LIMITED (0: no limit)',
    default: '20',
  },
  {
    name: 'KEYLESS_REFUSALS_PER_MINUTE',
    help: "requests without a working credential that one client address may have refused for needing one, per minute; past it that address's requests without a credential get RATE_LIMITED before their body is read (0: no limit)",
    default: '60',
  },
  {
    name: 'KEYLESS_WORK_MS_PER_MINUTE',
    help: "work the operations of callers without an accepted key (none, a refused or made-up one, a header that is not a Bearer credential) may cost this process per client address per minute: milliseconds of parsing, validating and running them, and 1 per 64 KiB read or answered; past it that address's requests without an accepted key get RATE_LIMITED before their body is read (0: no limit)",
    default: '1000',
  },
  {
    name: 'KEYLESS_TOTAL_WORK_MS_PER_MINUTE',
    help: 'the same work for every caller without an accepted key together, per minute, in this process: the most of it they can take whatever their number of addresses; a key nobody has judged yet is neither charged to it nor refused by it (0: no limit)',
    default: '3000',
  },
  {
    name: 'CLIENT_TOKEN_SECRET',
    help: 'secret (32 characters or more) that client tokens are encrypted under; several, comma-separated, to rotate: the first makes new tokens, all are accepted. Required with REDIS_URL',
    default: 'generated once and kept in DATA_DIR/client-token.secret',
  },
  {
    name: 'EVENT_RETENTION',
    help: 'how long webhook events, their de-duplication entries and ownership records are kept (e.g. 30d, 12h, 90m, 5s)',
    default: '30d',
  },
  { name: 'IDEMPOTENCY_RETENTION', help: 'how long idempotency keys are kept', default: '24h' },
  {
    name: 'WORKERS',
    help: 'processes serving the one port, for machines with more cores than one process uses (more than 1 needs REDIS_URL, through which they share events, idempotency and limits)',
    default: '1',
  },
  {
    name: 'SHUTDOWN_GRACE_MS',
    help: 'on SIGTERM, how long in-flight requests may take before connections are cut',
    default: '10000',
  },
  {
    name: 'SUBSCRIBER_MAX_PENDING',
    help: 'events one subscriber may have waiting: over it for more than 1 s, or 10 times over at once, it is disconnected (SSE: KiB unsent)',
    default: '1000',
  },
  { name: 'WS_MAX_SUBSCRIPTIONS', help: 'operations one WebSocket may run at once', default: '100' },
  {
    name: 'SUBSCRIPTIONS_PER_KEY',
    help: 'subscriptions one merchant key may hold open at once on one instance, over every socket and stream, those of its client tokens included; the next gets TOO_MANY_SUBSCRIPTIONS (0: no cap)',
    default: '5000',
  },
  {
    name: 'SUBSCRIPTIONS_PER_CLIENT_TOKEN',
    help: 'subscriptions one client token may hold open at once on one instance, over every socket and stream (0: no cap)',
    default: '20',
  },
  {
    name: 'SUBSCRIPTIONS_PER_ADDRESS',
    help: 'subscriptions the client tokens and not yet accepted keys of one client address may hold open at once on one instance (IPv6: per /64; 0: no cap)',
    default: '500',
  },
  {
    name: 'SUBSCRIPTION_ACCESS_CHECKS',
    help: 'upstream access checks one deliveryEvents subscription without uids may make per minute, for deliveries the facade has no owner record of (each also takes one unit of RATE_LIMIT_PER_MINUTE); past either, their events are skipped (0: never asked)',
    default: '50',
  },
  {
    name: 'RECONCILE_INTERVAL_MS',
    help: 'a delivery a live subscriber follows is read from the upstream when no event has come for this long, and a change found is pushed as an event; 0: never',
    default: '30000; 5000 without webhooks (WEBHOOK_PUBLIC_KEY_FILE unset with UPSTREAM_URL)',
  },
  {
    name: 'RECONCILE_MAX_READS_PER_SECOND',
    help: 'most reconciliation reads one instance makes per second, however many deliveries it follows',
    default: '100',
  },
  {
    name: 'RECONCILE_UNFOLLOWED_INTERVAL_MS',
    help: 'each unfinished delivery the facade knows (booked or read through it within RECONCILE_UNFOLLOWED_WINDOW) is read from the upstream this often though nobody follows it, so that deliveryEvents and Delivery.events get every change; within RECONCILE_MAX_READS_PER_SECOND, shared fairly across merchants; 0: never',
    default: 'ten RECONCILE_INTERVAL_MS (300000; 50000 without webhooks)',
  },
  {
    name: 'RECONCILE_UNFOLLOWED_WINDOW',
    help: 'deliveries whose owner record (their booking, or first read through the facade) is older than this are no longer read unless followed (e.g. 7d, 12h); at most EVENT_RETENTION',
    default: '7d',
  },
  {
    name: 'FINALITY_GRACE_MS',
    help: 'a cancel or failure with no evidence of pickup ends a subscription only once a read this long after it still says so (a return or second attempt may follow)',
    default: '120000',
  },
  {
    name: 'KEY_RECONFIRM_INTERVAL_MS',
    help: "every open subscription's key (a client token's: its merchant key) is re-confirmed with the upstream at least this often, one call per key whatever its number of subscriptions (none when another call proved the key within the interval); a key the upstream refuses ends them UNAUTHENTICATED (100 to 600000)",
    default: 'RECONCILE_INTERVAL_MS, at most 30000 (also when RECONCILE_INTERVAL_MS is 0)',
  },
  {
    name: 'GRAPHQL_INTROSPECTION',
    help: 'true or false: schema introspection and GraphiQL',
    default: 'false in production, else true',
  },
  {
    name: 'FEDERATION_SDL',
    help: "true or false: federation's _service { sdl } (the whole schema), for a gateway that composes from it",
    default: 'in production as GRAPHQL_INTROSPECTION (false), else true',
  },
  { name: 'GRAPHQL_MAX_BODY_BYTES', help: 'largest GraphQL request body accepted (413 above)', default: '1048576' },
  {
    name: 'PERSISTED_OPERATIONS_FILE',
    help: 'JSON file of {"<sha256>": "<document>"}: when set, only these operations run',
    default: 'unset: any operation',
  },
  {
    name: 'APQ_MAX_ENTRIES',
    help: 'automatic persisted queries (Apollo APQ) each process remembers, least recently used first out; shared through REDIS_URL when set (0: APQ off; ignored with PERSISTED_OPERATIONS_FILE)',
    default: '10000',
  },
  {
    name: 'GRAPHQL_MAX_RESPONSE_BYTES',
    help: 'largest GraphQL response; a larger one is replaced by a RESPONSE_TOO_LARGE error',
    default: '10485760',
  },
  {
    name: 'RATE_LIMIT_PER_MINUTE',
    help: 'GraphQL operations one merchant key may run per minute (0: no limit)',
    default: '6000',
  },
  {
    name: 'CLIENT_TOKEN_RATE_LIMIT_PER_MINUTE',
    help: "GraphQL operations one client token may run per minute, on its own budget, never its merchant's (0: no limit)",
    default: '600',
  },
  {
    name: 'CLIENT_TOKEN_ADDRESS_RATE_LIMIT_PER_MINUTE',
    help: 'GraphQL operations all client tokens together may run per minute from one client address (IPv6: per /64; 0: no limit)',
    default: '3000',
  },
  {
    name: 'MAX_DOCUMENT_BYTES',
    help: 'longest GraphQL query text parsed, comments and whitespace included (DOCUMENT_TOO_LARGE, HTTP 413, above)',
    default: '16384',
  },
  {
    name: 'GRAPHQL_CACHE_BYTES',
    help: 'heap the shared cache of parsed, validated and compiled documents may hold, each entry weighed by what it holds; only callers with an accepted key or a client token fill it (0: nothing kept)',
    default: '67108864',
  },
  {
    name: 'GRAPHQL_COMPILE_MAX_FIELDS',
    help: 'most fields, fragments spread and aliases counted apart, that an operation may resolve to be compiled by graphql-jit (a compile blocks the process about 0.05 ms a field); larger ones run on graphql-js',
    default: '100',
  },
  {
    name: 'GRAPHQL_COMPILES_PER_MINUTE',
    help: 'graphql-jit compiles per process and minute, at most a third of them for one merchant key; only accepted merchant keys compile, never client tokens (0: nothing compiled)',
    default: '60',
  },
  { name: 'SANDBOX_PORT', help: 'port of the embedded sandbox (0: any free port)', default: '4010' },
  {
    name: 'SANDBOX_HOST',
    help: 'address the embedded sandbox listens on; beyond loopback (0.0.0.0) it needs SANDBOX_CONTROL_TOKEN',
    default: '127.0.0.1',
  },
  {
    name: 'SANDBOX_CONTROL_TOKEN',
    help: `token (${MIN_CONTROL_TOKEN_LENGTH} characters or more) every /sandbox control route of the embedded sandbox then needs, as the ${CONTROL_TOKEN_HEADER} header; required with SANDBOX_HOST beyond loopback. In production those routes change nothing and /sandbox/info is refused, token or not`,
    default: 'unset: the control routes are open, on loopback only',
  },
  {
    name: 'SANDBOX_STEP_MS',
    help: 'time between simulated milestones in the embedded sandbox',
    default: String(DEFAULT_STEP_MS),
  },
  {
    name: 'SANDBOX_RETURN_RATE',
    help: 'share (0 to 1) of embedded-sandbox deliveries that fail or are canceled by the provider after pickup and then come back (the return path)',
    default: '0.1',
  },
  {
    name: 'LOG_LEVEL',
    help: 'fatal, error, warn, info, debug, trace or silent (info: one line per request; debug: also each upstream call)',
    default: 'info',
  },
  {
    name: 'LOG_FORMAT',
    help: 'pretty (readable, coloured lines) or json (one JSON object a line)',
    default: 'pretty when stdout is a terminal, else json',
  },
  { name: 'METRICS', help: 'true or false: Prometheus metrics at GET /metrics', default: 'true' },
  {
    name: 'METRICS_PORT',
    help: 'a port of its own for GET /metrics, on METRICS_HOST (the main port then answers /metrics 404 unless METRICS_TOKEN is set)',
    default: 'unset',
  },
  {
    name: 'METRICS_HOST',
    help: 'address the METRICS_PORT listener binds (0.0.0.0 for a scraper on another machine)',
    default: '127.0.0.1',
  },
  {
    name: 'METRICS_TOKEN',
    help: 'bearer token (16 characters or more) every /metrics request must carry as "Authorization: Bearer <token>", else 401; with it /metrics is also served on the main port',
    default: 'unset',
  },
  { name: 'TRACKING_PAGE', help: 'true or false: the live tracking page at GET /', default: 'true' },
  {
    name: 'OTEL_TRACES_EXPORTER',
    help: 'otlp (OTLP over HTTP), console (spans on stdout) or none: turns OpenTelemetry tracing on (HTTP server spans, a span per GraphQL operation, each upstream request)',
    default: 'none, unless an OTLP endpoint is set',
  },
  {
    name: 'OTEL_EXPORTER_OTLP_ENDPOINT',
    help: 'OTLP/HTTP collector base URL; spans go to <url>/v1/traces; setting it turns tracing on',
    default: 'http://localhost:4318',
  },
  {
    name: 'OTEL_EXPORTER_OTLP_TRACES_ENDPOINT',
    help: 'full OTLP/HTTP traces URL, used as it is (overrides the above); setting it turns tracing on',
    default: 'unset',
  },
  {
    name: 'OTEL_EXPORTER_OTLP_HEADERS',
    help: 'headers sent with every export, key=value comma-separated (URL-encoded values), e.g. a collector API key; OTEL_EXPORTER_OTLP_TRACES_HEADERS adds or overrides',
    default: 'unset',
  },
  {
    name: 'OTEL_EXPORTER_OTLP_TRACES_HEADERS',
    help: 'headers sent with trace exports only (as OTEL_EXPORTER_OTLP_HEADERS)',
    default: 'unset',
  },
  { name: 'OTEL_SERVICE_NAME', help: 'service.name of the spans', default: 'delivery-graph' },
  {
    name: 'OTEL_RESOURCE_ATTRIBUTES',
    help: 'resource attributes of every span, key=value comma-separated (e.g. deployment.environment.name=prod)',
    default: 'unset',
  },
  {
    name: 'OTEL_TRACES_SAMPLER',
    help: `which traces are kept: ${'always_on, always_off, traceidratio, parentbased_always_on, parentbased_always_off, parentbased_traceidratio'}`,
    default: 'parentbased_always_on',
  },
  { name: 'OTEL_TRACES_SAMPLER_ARG', help: 'the ratio (0 to 1) of the traceidratio samplers', default: '1' },
  { name: 'OTEL_SDK_DISABLED', help: 'true: no tracing, whatever else is set', default: 'false' },
  { name: 'OTEL_TRACING', help: 'deprecated: true is OTEL_TRACES_EXPORTER=otlp', default: 'false' },
  {
    name: 'NODE_ENV',
    help: 'production, development or test (anything else stops the start): production turns off GraphiQL, introspection and the federation SDL (see GRAPHQL_INTROSPECTION, FEDERATION_SDL), and /metrics on the main port unless METRICS_TOKEN is set, and requires UPSTREAM_URL and (with it) WEBHOOK_PUBLIC_KEY_FILE unless chosen otherwise in so many words (UPSTREAM_URL=sandbox, WEBHOOKS=off)',
    default: 'development',
  },
];

type Env = Record<string, string | undefined>;

/**
 * Beginnings only our settings have: a variable that starts with one and is not
 * one of ours is most likely a misspelling (REDIS_ULR). Common words (DATA_, MAX_,
 * LOG_) and other programs' families (OTEL_, NODE_) are left out: the environment
 * is shared, and a warning about someone else's variable is noise.
 */
/**
 * Variables of the project's own test and bench scripts, which the processes they start inherit: not misspellings of
 * ours.
 */
const PROJECT_TOOLING: ReadonlySet<string> = new Set([
  'REDIS_TEST_URL',
  'REDIS_SERVER_DIR',
  'WS_LEAK_CYCLES',
  'CRASH_TRIALS',
  'CRASH_EVENTS',
  'TEST_INSTALL_DEPS',
  'BENCH_WRITE',
  'BENCH_PROFILE',
]);
const SETTING_FAMILIES = [
  'APQ_',
  'BREAKER_',
  'CLIENT_TOKEN_',
  'CORS_',
  'FEDERATION_',
  'GRAPHQL_',
  'IDEMPOTENCY_',
  'KEYLESS_',
  'METRICS_',
  'PERSISTED_',
  'PLATFORM_',
  'RATE_LIMIT_',
  'RECONCILE_',
  'REDIS_',
  'SANDBOX_',
  'SHUTDOWN_',
  'SUBSCRIBER_',
  'SUBSCRIPTION_',
  'TRACKING_',
  'UPSTREAM_',
  'WEBHOOK_',
  'WS_',
];

/** Edits (insert, delete, substitute, swap two neighbours) that turn a into b. */
function editDistance(a: string, b: string): number {
  const rows = Array.from({ length: a.length + 1 }, (_, i) =>
    Array.from({ length: b.length + 1 }, (_, j) => (i === 0 ? j : j === 0 ? i : 0)),
  );
  for (let i = 1; i <= a.length; i += 1) {
    for (let j = 1; j <= b.length; j += 1) {
      const cost = a[i - 1] === b[j - 1] ? 0 : 1;
      let best = Math.min(rows[i - 1]![j]! + 1, rows[i]![j - 1]! + 1, rows[i - 1]![j - 1]! + cost);
      if (i > 1 && j > 1 && a[i - 1] === b[j - 2] && a[i - 2] === b[j - 1])
        best = Math.min(best, rows[i - 2]![j - 2]! + 1);
      rows[i]![j] = best;
    }
  }
  return rows[a.length]![b.length]!;
}

export interface UnknownSetting {
  /** The variable as it is set. */
  variable: string;
  /** The setting of ours it is closest to. */
  closest: string;
}

/**
 * Variables that look like settings of ours but are not (REDIS_ULR, UPSTREAM_TIMEOUT,
 * redis_url): each with the known name closest to it. loadConfig ignores them;
 * start-up names them as a warning, since a misspelled setting is silently a default.
 */
export function unknownSettings(env: Env = process.env): UnknownSetting[] {
  const known = new Set(CONFIG_VARIABLES.map((variable) => variable.name));
  const found: UnknownSetting[] = [];
  for (const variable of Object.keys(env)) {
    if (known.has(variable) || PROJECT_TOOLING.has(variable) || env[variable] === undefined) continue;
    const upper = variable.toUpperCase();
    const ranked = [...known]
      .map((name) => ({ name, distance: editDistance(upper, name) }))
      .sort((a, b) => a.distance - b.distance);
    const closest = ranked[0]!;
    // Ours by its family, or one or two slips away from a name of ours (long names only: HOME is not HOST).
    const looksOurs =
      SETTING_FAMILIES.some((family) => upper.startsWith(family)) ||
      (upper.includes('_') && closest.distance <= (upper.length >= 10 ? 2 : 1));
    if (looksOurs) found.push({ variable, closest: closest.name });
  }
  return found;
}

function text(env: Env, name: string): string | undefined {
  const value = env[name]?.trim();
  return value === '' ? undefined : value;
}

function integer(env: Env, name: string, fallback: number, min: number, max: number): number {
  const raw = text(env, name);
  if (raw === undefined) return fallback;
  if (!/^\d+$/.test(raw)) throw new ConfigError(name, `expected a whole number, got "${raw}"`);
  const value = Number(raw);
  if (value < min || value > max) throw new ConfigError(name, `expected ${min} to ${max}, got ${value}`);
  return value;
}

const DURATION_UNITS_MS: Record<string, number> = { ms: 1, s: 1_000, m: 60_000, h: 3_600_000, d: 86_400_000 };

/** A duration such as 30d, 12h, 90m, 5s or 250ms, in milliseconds. */
function duration(env: Env, name: string, fallback: string, minMs: number): number {
  const raw = text(env, name) ?? fallback;
  const match = /^(\d+)\s*(ms|s|m|h|d)$/i.exec(raw);
  if (!match) throw new ConfigError(name, `expected a duration such as 30d, 12h, 90m or 5s, got "${raw}"`);
  const ms = Number(match[1]) * DURATION_UNITS_MS[match[2]!.toLowerCase()]!;
  if (ms < minMs || ms > 10 * 365 * 86_400_000)
    throw new ConfigError(name, `expected ${minMs / 1000} s to 10 years, got "${raw}"`);
  return ms;
}

/** false/0: no proxy; true: one; N: that many proxies append to X-Forwarded-For. */
function proxyHops(env: Env, name: string): number {
  const raw = text(env, name)?.toLowerCase();
  if (raw === undefined || raw === 'false') return 0;
  if (raw === 'true') return 1;
  if (/^\d{1,2}$/.test(raw)) return Number(raw);
  throw new ConfigError(name, `expected false, true or a number of proxies, got "${raw}"`);
}

/** A share from 0 to 1, e.g. 0.1. */
function fraction(env: Env, name: string, fallback: number): number {
  const raw = text(env, name);
  if (raw === undefined) return fallback;
  const value = Number(raw);
  if (!/^\d*\.?\d+$/.test(raw) || !(value >= 0 && value <= 1))
    throw new ConfigError(name, `expected a number from 0 to 1, got "${raw}"`);
  return value;
}

function oneOf<T extends string>(env: Env, name: string, allowed: readonly T[], fallback: T): T {
  const raw = text(env, name);
  if (raw === undefined) return fallback;
  const value = raw.toLowerCase() as T;
  if (!allowed.includes(value)) throw new ConfigError(name, `expected one of ${allowed.join(', ')}, got "${raw}"`);
  return value;
}

/** An http(s) URL, or undefined when the variable is unset. */
function httpUrlOf(env: Env, name: string): URL | undefined {
  const raw = text(env, name);
  if (raw === undefined) return undefined;
  let url: URL;
  try {
    url = new URL(raw);
  } catch {
    throw new ConfigError(name, `not a URL: "${raw}"`);
  }
  if (url.protocol !== 'http:' && url.protocol !== 'https:')
    throw new ConfigError(name, `expected http or https, got ${url.protocol}`);
  return url;
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

/**
 * KEY_RECONFIRM_INTERVAL_MS's default is RECONCILE_INTERVAL_MS, but never longer than this: a revoked key streams at
 * most this long.
 */
const MAX_KEY_RECONFIRM_DEFAULT_MS = 30_000;

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

/** Shorter metrics tokens are refused: the token is all that stands between the internet and /metrics. */
export const MIN_METRICS_TOKEN_LENGTH = 16;

function metricsToken(env: Env, name: string): string | undefined {
  const token = text(env, name);
  if (token === undefined) return undefined;
  // The token itself is never echoed.
  if (/\s/.test(token))
    throw new ConfigError(name, 'must not contain whitespace (it is sent as "Authorization: Bearer <token>")');
  if (token.length < MIN_METRICS_TOKEN_LENGTH)
    throw new ConfigError(
      name,
      `is ${token.length} characters; at least ${MIN_METRICS_TOKEN_LENGTH} are required (e.g. openssl rand -hex 24)`,
    );
  return token;
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

/** An optional listen port that must not be one the facade already uses (0: any free port, never a clash). */
function extraPort(env: Env, name: string, taken: ReadonlyArray<[string, number | undefined]>): number | undefined {
  if (text(env, name) === undefined) return undefined;
  const port = integer(env, name, 0, 0, 65535);
  for (const [other, value] of taken) {
    if (port !== 0 && port === value) throw new ConfigError(name, `${port} is ${other} as well; choose another port`);
  }
  return port;
}

/** Slots kept for webhooks: at most half of MAX_CONNECTIONS, so that the rest stay for everyone else. */
function webhookConnections(env: Env, name: string, maxConnections: number | undefined): number | undefined {
  if (text(env, name) === undefined) return undefined;
  const slots = integer(env, name, 0, 0, 10_000_000);
  if (maxConnections !== undefined && slots > maxConnections / 2)
    throw new ConfigError(name, `${slots} is more than half of MAX_CONNECTIONS (${maxConnections})`);
  return slots;
}

/**
 * `key=value,key=value` (values URL-encoded), as the OpenTelemetry specification writes headers and resource
 * attributes.
 */
function keyValues(env: Env, name: string): Record<string, string> {
  const raw = text(env, name);
  const pairs: Record<string, string> = {};
  if (raw === undefined) return pairs;
  for (const part of raw.split(',')) {
    if (part.trim() === '') continue;
    const at = part.indexOf('=');
    const key = at > 0 ? part.slice(0, at).trim() : '';
    // The value may be a secret (an API key): the message names the entry, never its value.
    if (key === '') throw new ConfigError(name, 'expected key=value pairs separated by commas');
    try {
      pairs[key] = decodeURIComponent(part.slice(at + 1).trim());
    } catch {
      throw new ConfigError(name, `the value of ${key} is not valid URL-encoding`);
    }
  }
  return pairs;
}

function tracingConfig(env: Env): Config['tracing'] {
  const exporterName = oneOf(env, 'OTEL_TRACES_EXPORTER', ['otlp', 'console', 'none', 'unset'] as const, 'unset');
  const tracesEndpoint = httpUrlOf(env, 'OTEL_EXPORTER_OTLP_TRACES_ENDPOINT');
  const endpoint = httpUrlOf(env, 'OTEL_EXPORTER_OTLP_ENDPOINT');
  const legacy = oneOf(env, 'OTEL_TRACING', ['true', 'false'] as const, 'false') === 'true';
  const disabled = oneOf(env, 'OTEL_SDK_DISABLED', ['true', 'false'] as const, 'false') === 'true';
  const wanted =
    exporterName === 'otlp' ||
    exporterName === 'console' ||
    (exporterName === 'unset' && (tracesEndpoint !== undefined || endpoint !== undefined || legacy));
  const ratio = text(env, 'OTEL_TRACES_SAMPLER_ARG') === undefined ? 1 : Number(text(env, 'OTEL_TRACES_SAMPLER_ARG'));
  if (!Number.isFinite(ratio) || ratio < 0 || ratio > 1)
    throw new ConfigError(
      'OTEL_TRACES_SAMPLER_ARG',
      `expected a ratio from 0 to 1, got "${text(env, 'OTEL_TRACES_SAMPLER_ARG')}"`,
    );
  return {
    enabled: wanted && !disabled,
    exporter: exporterName === 'console' ? 'console' : 'otlp',
    tracesUrl: tracesEndpoint?.href ?? `${(endpoint?.href ?? 'http://localhost:4318').replace(/\/+$/, '')}/v1/traces`,
    headers: {
      ...keyValues(env, 'OTEL_EXPORTER_OTLP_HEADERS'),
      ...keyValues(env, 'OTEL_EXPORTER_OTLP_TRACES_HEADERS'),
    },
    serviceName: text(env, 'OTEL_SERVICE_NAME') ?? 'delivery-graph',
    resourceAttributes: keyValues(env, 'OTEL_RESOURCE_ATTRIBUTES'),
    sampler: { name: oneOf(env, 'OTEL_TRACES_SAMPLER', TRACE_SAMPLERS, 'parentbased_always_on'), ratio },
  };
}

/** REDIS_SENTINELS=host:port,host:port with REDIS_SENTINEL_NAME, or nothing. */
function sentinelConfig(env: Env): RedisSentinelConfig | undefined {
  const raw = text(env, 'REDIS_SENTINELS');
  const name = text(env, 'REDIS_SENTINEL_NAME');
  if (raw === undefined) {
    if (name !== undefined)
      throw new ConfigError('REDIS_SENTINEL_NAME', 'set with REDIS_SENTINELS (the Sentinels to ask for this primary)');
    return undefined;
  }
  const sentinels = raw
    .split(',')
    .map((part) => part.trim())
    .filter(Boolean)
    .map((part) => {
      const match = /^(\[[^\]]+\]|[^:\s]+):(\d{1,5})$/.exec(part);
      const port = match ? Number(match[2]) : NaN;
      if (!match || port < 1 || port > 65535)
        throw new ConfigError('REDIS_SENTINELS', `expected comma-separated host:port, got "${part}"`);
      return { host: match[1]!.replace(/^\[|\]$/g, ''), port };
    });
  if (sentinels.length === 0) throw new ConfigError('REDIS_SENTINELS', 'expected comma-separated host:port');
  if (name === undefined)
    throw new ConfigError(
      'REDIS_SENTINEL_NAME',
      'required with REDIS_SENTINELS: the name the Sentinels monitor the primary under (`sentinel monitor <name> …`)',
    );
  return {
    sentinels,
    name,
    password: text(env, 'REDIS_PASSWORD'),
    username: text(env, 'REDIS_USERNAME'),
    sentinelPassword: text(env, 'REDIS_SENTINEL_PASSWORD'),
    tls: oneOf(env, 'REDIS_TLS', ['true', 'false'] as const, 'false') === 'true',
    sentinelTls: oneOf(env, 'REDIS_SENTINEL_TLS', ['true', 'false'] as const, 'false') === 'true',
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

function persistedOperations(env: Env, name: string): { file: string; operations: Record<string, string> } | undefined {
  const file = text(env, name);
  if (file === undefined) return undefined;
  let parsed: unknown;
  try {
    parsed = JSON.parse(readFileSync(file, 'utf8'));
  } catch (error) {
    const reason = error instanceof SyntaxError ? 'not JSON' : ((error as NodeJS.ErrnoException).code ?? 'error');
    throw new ConfigError(name, `cannot read ${file} (${reason})`);
  }
  if (!parsed || typeof parsed !== 'object' || Array.isArray(parsed))
    throw new ConfigError(name, `${file} must hold a JSON object of {"<hash>": "<document>"}`);
  const entries = Object.entries(parsed);
  if (entries.length === 0) throw new ConfigError(name, `${file} lists no operation`);
  for (const [id, document] of entries) {
    if (typeof document !== 'string' || document.trim() === '')
      throw new ConfigError(name, `${file}: the entry "${id}" is not a document string`);
  }
  return { file, operations: Object.fromEntries(entries) as Record<string, string> };
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
function nodeEnv(env: Env): (typeof NODE_ENVS)[number] {
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

/** Parses and checks the environment once; the result is deeply frozen. */
export function loadConfig(env: Env = process.env): Config {
  const production = nodeEnv(env) === 'production';
  // The simulator by choice (UPSTREAM_URL=sandbox), or by default outside production only: a production
  // start without an upstream would book on a simulator while every probe stays green.
  const sandboxAsked = text(env, 'UPSTREAM_URL')?.toLowerCase() === SANDBOX_UPSTREAM;
  const upstreamUrl = sandboxAsked ? undefined : upstreamBaseUrl(env, 'UPSTREAM_URL');
  if (production && upstreamUrl === undefined && !sandboxAsked) {
    throw new ConfigError(
      'UPSTREAM_URL',
      `required in production (NODE_ENV=production): the upstream's base URL ending in /api/v1, or UPSTREAM_URL=${SANDBOX_UPSTREAM} to run the embedded simulator on purpose`,
    );
  }
  const platformId = text(env, 'PLATFORM_ID');
  if (upstreamUrl && !platformId) throw new ConfigError('PLATFORM_ID', 'required when UPSTREAM_URL is set');
  if (platformId && !/^[A-Za-z0-9._~-]+$/.test(platformId))
    throw new ConfigError('PLATFORM_ID', 'must be a single URL path segment');

  const key = publicKeys(env, 'WEBHOOK_PUBLIC_KEY_FILE');
  const issuer = text(env, 'WEBHOOK_ISSUER');
  if (key && !issuer) throw new ConfigError('WEBHOOK_ISSUER', 'required when WEBHOOK_PUBLIC_KEY_FILE is set');
  // The embedded sandbox signs with a key the facade knows; a real upstream's key must be given.
  const webhooksEnabled = webhooksOn(env, production, key !== undefined, upstreamUrl);
  const eventRetentionMs = duration(env, 'EVENT_RETENTION', '30d', 1_000);
  // Without webhooks, reads are all a subscriber gets: poll more often.
  const reconcileIntervalMs = integer(env, 'RECONCILE_INTERVAL_MS', webhooksEnabled ? 30_000 : 5_000, 0, 86_400_000);

  const webhookPath = text(env, 'WEBHOOK_PATH') ?? '/webhooks';
  if (!/^\/[A-Za-z0-9._~/-]*$/.test(webhookPath))
    throw new ConfigError('WEBHOOK_PATH', `expected a path starting with /, got "${webhookPath}"`);
  if (
    ['/graphql', '/health', '/ready', '/metrics', '/', '/index.html'].includes(webhookPath) ||
    webhookPath.startsWith('/tracking/') ||
    webhookPath.startsWith('/graphiql/')
  ) {
    throw new ConfigError('WEBHOOK_PATH', `${webhookPath} is taken by another endpoint`);
  }

  const redisUrl = text(env, 'REDIS_URL');
  if (redisUrl !== undefined && !/^rediss?:\/\//.test(redisUrl))
    throw new ConfigError('REDIS_URL', 'expected redis:// or rediss://');
  const redisSentinel = sentinelConfig(env);
  if (redisSentinel && redisUrl !== undefined)
    throw new ConfigError('REDIS_SENTINELS', 'set either REDIS_URL or REDIS_SENTINELS, not both');
  const redis = redisUrl ?? redisSentinel;
  // Each worker has its own memory: only through Redis do they share events, idempotency keys and limits.
  if (integer(env, 'WORKERS', 1, 1, 256) > 1 && redis === undefined)
    throw new ConfigError(
      'WORKERS',
      'more than one worker needs REDIS_URL or REDIS_SENTINELS (the workers share events, idempotency and limits through it)',
    );

  const port = integer(env, 'PORT', 4000, 0, 65535);
  const introspection =
    oneOf(env, 'GRAPHQL_INTROSPECTION', ['true', 'false'] as const, production ? 'false' : 'true') === 'true';
  const webhookPort = extraPort(env, 'WEBHOOK_PORT', [['PORT', port]]);
  const metricsPort = extraPort(env, 'METRICS_PORT', [
    ['PORT', port],
    ['WEBHOOK_PORT', webhookPort],
  ]);
  const token = metricsToken(env, 'METRICS_TOKEN');
  const amountUnit = oneOf(env, 'UPSTREAM_AMOUNT_UNIT', AMOUNT_UNITS, 'cents');
  const maxConnections =
    text(env, 'MAX_CONNECTIONS') === undefined ? undefined : integer(env, 'MAX_CONNECTIONS', 0, 16, 10_000_000);

  const config: Config = {
    port,
    host: text(env, 'HOST') ?? '127.0.0.1',
    production,
    logLevel: oneOf(env, 'LOG_LEVEL', ['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent'] as const, 'info'),
    // The one default not read from env: whether a person is watching (a terminal) or a machine collects the lines.
    logFormat: oneOf(env, 'LOG_FORMAT', ['pretty', 'json'] as const, process.stdout.isTTY ? 'pretty' : 'json'),
    dataDir: path.resolve(text(env, 'DATA_DIR') ?? './data'),
    redisUrl,
    redisSentinel,
    redisMinReplicasAck:
      text(env, 'REDIS_MIN_REPLICAS_ACK') === undefined ? undefined : integer(env, 'REDIS_MIN_REPLICAS_ACK', 1, 0, 16),
    redisReplicaAckTimeoutMs: integer(env, 'REDIS_REPLICA_ACK_TIMEOUT_MS', 1000, 10, 60_000),
    corsOrigins: corsOrigins(env, 'CORS_ORIGINS'),
    upstream: {
      url: upstreamUrl,
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
    },
    webhook: {
      path: webhookPath,
      port: webhookPort,
      maxTokenBytes: integer(env, 'WEBHOOK_MAX_TOKEN_BYTES', 262_144, 16_384, 16_777_216),
      bodyTimeoutMs: integer(env, 'WEBHOOK_BODY_TIMEOUT_MS', 10_000, 100, 600_000),
      // An hour is already far more skew than a synchronised clock has; past that, expired tokens would be a replay
      // window.
      clockToleranceSeconds: integer(env, 'WEBHOOK_CLOCK_TOLERANCE_SECONDS', 30, 0, 3600),
      publicKeyPems: key?.pems,
      publicKeyFile: key?.file,
      issuer,
    },
    graphql: {
      maxBatchSize: integer(env, 'MAX_BATCH_SIZE', 100, 1, 10_000),
      batchConcurrency: integer(env, 'BATCH_CONCURRENCY', 64, 1, 1_000),
      introspection,
      // The SDL tells what introspection does: in production it is closed with it unless a gateway needs it
      // (docs/federation.md).
      federationSdl:
        oneOf(env, 'FEDERATION_SDL', ['true', 'false'] as const, !production || introspection ? 'true' : 'false') ===
        'true',
      maxBodyBytes: integer(env, 'GRAPHQL_MAX_BODY_BYTES', 1_048_576, 1024, 1_073_741_824),
      persistedOperations: persistedOperations(env, 'PERSISTED_OPERATIONS_FILE'),
      apqMaxEntries: integer(env, 'APQ_MAX_ENTRIES', 10_000, 0, 10_000_000),
      rateLimitPerMinute: integer(env, 'RATE_LIMIT_PER_MINUTE', 6000, 0, 10_000_000),
      clientTokenRateLimitPerMinute: integer(env, 'CLIENT_TOKEN_RATE_LIMIT_PER_MINUTE', 600, 0, 10_000_000),
      clientTokenAddressRateLimitPerMinute: integer(
        env,
        'CLIENT_TOKEN_ADDRESS_RATE_LIMIT_PER_MINUTE',
        3000,
        0,
        10_000_000,
      ),
      maxDocumentBytes: integer(env, 'MAX_DOCUMENT_BYTES', 16_384, 256, 1_048_576),
      cacheBytes: integer(env, 'GRAPHQL_CACHE_BYTES', 67_108_864, 0, 17_179_869_184),
      compileMaxFields: integer(env, 'GRAPHQL_COMPILE_MAX_FIELDS', 100, 0, 1_000_000),
      compilesPerMinute: integer(env, 'GRAPHQL_COMPILES_PER_MINUTE', 60, 0, 1_000_000),
      maxResponseBytes: integer(env, 'GRAPHQL_MAX_RESPONSE_BYTES', 10_485_760, 1024, 1_073_741_824),
    },
    shutdownGraceMs: integer(env, 'SHUTDOWN_GRACE_MS', 10_000, 0, 600_000),
    workers: integer(env, 'WORKERS', 1, 1, 256),
    server: {
      maxConnections,
      maxConnectionsPerAddress:
        text(env, 'MAX_CONNECTIONS_PER_ADDRESS') === undefined
          ? undefined
          : integer(env, 'MAX_CONNECTIONS_PER_ADDRESS', 0, 0, 10_000_000),
      webhookConnections: webhookConnections(env, 'WEBHOOK_CONNECTIONS', maxConnections),
      headersTimeoutMs: integer(env, 'HEADERS_TIMEOUT_MS', 10_000, 100, 600_000),
      requestTimeoutMs: integer(env, 'REQUEST_TIMEOUT_MS', 30_000, 100, 3_600_000),
      trustProxyHops: proxyHops(env, 'TRUST_PROXY'),
    },
    authFailuresPerMinute: integer(env, 'AUTH_FAILURES_PER_MINUTE', 20, 0, 1_000_000),
    keylessRefusalsPerMinute: integer(env, 'KEYLESS_REFUSALS_PER_MINUTE', 60, 0, 1_000_000),
    keylessWorkMsPerMinute: integer(env, 'KEYLESS_WORK_MS_PER_MINUTE', 1_000, 0, 60_000_000),
    keylessTotalWorkMsPerMinute: integer(env, 'KEYLESS_TOTAL_WORK_MS_PER_MINUTE', 3_000, 0, 60_000_000),
    eventRetentionMs,
    clientTokenSecrets: clientTokenSecrets(env, 'CLIENT_TOKEN_SECRET', redis !== undefined),
    idempotencyRetentionMs: duration(env, 'IDEMPOTENCY_RETENTION', '24h', 1_000),
    realtime: {
      maxPendingEvents: integer(env, 'SUBSCRIBER_MAX_PENDING', 1000, 1, 1_000_000),
      maxSubscriptionsPerSocket: integer(env, 'WS_MAX_SUBSCRIPTIONS', 100, 1, 100_000),
      subscriptionsPerKey: integer(env, 'SUBSCRIPTIONS_PER_KEY', 5000, 0, 10_000_000),
      subscriptionsPerClientToken: integer(env, 'SUBSCRIPTIONS_PER_CLIENT_TOKEN', 20, 0, 1_000_000),
      subscriptionsPerAddress: integer(env, 'SUBSCRIPTIONS_PER_ADDRESS', 500, 0, 10_000_000),
      accessChecksPerMinute: integer(env, 'SUBSCRIPTION_ACCESS_CHECKS', 50, 0, 1_000_000),
      reconcileIntervalMs,
      reconcileMaxReadsPerSecond: integer(env, 'RECONCILE_MAX_READS_PER_SECOND', 100, 1, 100_000),
      reconcileUnfollowedIntervalMs: integer(
        env,
        'RECONCILE_UNFOLLOWED_INTERVAL_MS',
        10 * reconcileIntervalMs,
        0,
        864_000_000,
      ),
      reconcileUnfollowedWindowMs: Math.min(
        duration(env, 'RECONCILE_UNFOLLOWED_WINDOW', '7d', 1_000),
        eventRetentionMs,
      ),
      finalityGraceMs: integer(env, 'FINALITY_GRACE_MS', 120_000, 0, 86_400_000),
      // Revocation ends streams whether or not deliveries are polled: RECONCILE_INTERVAL_MS, at most 30 s, even when it
      // is 0 (off).
      keyReconfirmIntervalMs: integer(
        env,
        'KEY_RECONFIRM_INTERVAL_MS',
        reconcileIntervalMs > 0
          ? Math.min(reconcileIntervalMs, MAX_KEY_RECONFIRM_DEFAULT_MS)
          : MAX_KEY_RECONFIRM_DEFAULT_MS,
        100,
        600_000,
      ),
    },
    webhooksEnabled,
    webhooksOff: webhooksChoice(env) === 'off',
    metrics: oneOf(env, 'METRICS', ['true', 'false'] as const, 'true') === 'true',
    metricsAccess: {
      port: metricsPort,
      host: text(env, 'METRICS_HOST') ?? '127.0.0.1',
      token,
      // Platform-wide volumes and every tenant's operation names: public only outside production, and only when not
      // asked otherwise.
      onMainPort: token !== undefined || (!production && metricsPort === undefined),
    },
    trackingPage: oneOf(env, 'TRACKING_PAGE', ['true', 'false'] as const, 'true') === 'true',
    tracing: tracingConfig(env),
    sandbox: {
      port: integer(env, 'SANDBOX_PORT', 4010, 0, 65535),
      ...sandboxControl(env, upstreamUrl === undefined),
      stepMs: integer(env, 'SANDBOX_STEP_MS', DEFAULT_STEP_MS, 0, 3_600_000),
      returnRate: fraction(env, 'SANDBOX_RETURN_RATE', 0.1),
    },
  };
  return deepFreeze(config);
}

function deepFreeze<T>(value: T): T {
  if (value && typeof value === 'object') {
    for (const inner of Object.values(value)) deepFreeze(inner);
    Object.freeze(value);
  }
  return value;
}

// Every setting the facade reads, with the one line of help and the default `--help` prints, in the order it prints
// them. The area loaders beside this file read them; docs/configuration.md and .env.example list the same names.
import { CONTROL_TOKEN_HEADER, DEFAULT_STEP_MS, MIN_CONTROL_TOKEN_LENGTH } from '@delivery-graph/sandbox';

export interface ConfigVariable {
  name: string;
  /** The one line `--help` prints. */
  help: string;
  default: string;
  /** The pages of docs/ that say more (docs/configuration.md's table links them). */
  see?: readonly string[];
}

/** Every variable loadConfig reads. */
export const CONFIG_VARIABLES: readonly ConfigVariable[] = [
  { name: 'PORT', help: 'port the facade listens on (0: any free port)', default: '4000' },
  { name: 'HOST', help: 'address the facade listens on', default: '127.0.0.1' },
  {
    name: 'UPSTREAM_URL',
    see: ['operations.md#start-and-stop'],
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
    see: ['operations.md#webhooks'],
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
    see: ['limits.md#connections'],
    help: 'a port of its own for webhooks, on HOST, with WEBHOOK_CONNECTIONS slots no client of PORT can take (the main port then answers the webhook path 404); unset: webhooks come in on PORT',
    default: 'unset',
  },
  {
    name: 'WEBHOOK_MAX_TOKEN_BYTES',
    see: ['limits.md#the-front-door'],
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
    see: ['upstream.md#amounts-and-dates'],
    help: 'seconds a webhook JWT is still accepted after its exp (and before its nbf/iat), for clock skew between the upstream and this host; 0: none',
    default: '30',
  },
  {
    name: 'DATA_DIR',
    see: ['operations.md#data'],
    help: "directory of the embedded SQLite store, and of the embedded sandbox's world and signing key (DATA_DIR/sandbox)",
    default: './data',
  },
  { name: 'UPSTREAM_TIMEOUT_MS', help: 'budget of one upstream call, retries included', default: '10000' },
  {
    name: 'UPSTREAM_AMOUNT_UNIT',
    see: ['upstream.md#amounts-and-dates'],
    help: 'unit the upstream expects for request tip and package_value (and item price unless UPSTREAM_ITEM_PRICE_UNIT is set): cents or major',
    default: 'cents',
  },
  {
    name: 'UPSTREAM_READ_SCOPE',
    see: ['upstream.md#whose-delivery-it-is'],
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
    see: ['scale-out.md#redis-through-sentinel'],
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
    see: ['scale-out.md#acknowledged-means-on-a-replica'],
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
    name: 'READ_MAX_AGE',
    help: 'seconds: a delivery read is answered from the stored view when the upstream confirmed it (a read, or webhooks carrying its fields) this recently; a query may ask for less with maxAge (0: always read the upstream)',
    default: '30',
  },
  {
    name: 'MAX_CONNECTIONS',
    see: ['limits.md#connections'],
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
    see: ['limits.md#connections'],
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
    see: ['limits.md#keys-and-clients'],
    help: 'how long a merchant key the upstream refused (401) is answered UNAUTHENTICATED without asking the upstream again; a try after it costs the client address another of AUTH_FAILURES_PER_MINUTE; from 0 to 60000',
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
    see: ['limits.md#work-without-an-accepted-key'],
    help: "work the operations of callers without an accepted key (none, a refused or made-up one, a header that is not a Bearer credential) may cost this process per client address per minute: milliseconds of parsing, validating and running them, and 1 per 64 KiB read or answered; past it that address's requests without an accepted key get RATE_LIMITED before their body is read (0: no limit)",
    default: '1000',
  },
  {
    name: 'KEYLESS_TOTAL_WORK_MS_PER_MINUTE',
    see: ['limits.md#work-without-an-accepted-key'],
    help: 'the same work for every caller without an accepted key together, per minute, in this process: the most of it they can take whatever their number of addresses; a key nobody has judged yet is neither charged to it nor refused by it (0: no limit)',
    default: '3000',
  },
  {
    name: 'CLIENT_TOKEN_SECRET',
    see: ['client-tokens.md'],
    help: 'secret (32 characters or more) that client tokens are encrypted under; several, comma-separated, to rotate: the first makes new tokens, all are accepted. Required with REDIS_URL',
    default: 'generated once and kept in DATA_DIR/client-token.secret',
  },
  {
    name: 'EVENT_RETENTION',
    see: ['limits.md#retention'],
    help: 'how long webhook events, their de-duplication entries and ownership records are kept (e.g. 30d, 12h, 90m, 5s)',
    default: '30d',
  },
  { name: 'IDEMPOTENCY_RETENTION', help: 'how long idempotency keys are kept', default: '24h' },
  {
    name: 'WORKERS',
    see: ['scale-out.md#several-cores-on-one-machine'],
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
    see: ['limits.md#subscriptions'],
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
    see: ['subscriptions.md#deliveryeventsuids-names-after'],
    help: 'upstream access checks one deliveryEvents subscription without uids may make per minute, for deliveries the facade has no owner record of (each also takes one unit of RATE_LIMIT_PER_MINUTE); past either, their events are skipped (0: never asked)',
    default: '50',
  },
  {
    name: 'RECONCILE_INTERVAL_MS',
    see: ['subscriptions.md#when-no-webhook-comes'],
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
    see: ['subscriptions.md#when-nobody-follows-a-delivery'],
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
    see: ['subscriptions.md#when-a-delivery-is-final'],
    help: 'a cancel or failure with no evidence of pickup ends a subscription only once a read this long after it still says so (a return or second attempt may follow)',
    default: '120000',
  },
  {
    name: 'KEY_RECONFIRM_INTERVAL_MS',
    see: ['subscriptions.md#a-key-stays-valid-only-while-the-upstream-says-so'],
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
    see: ['federation.md#the-sdl-in-production'],
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
    see: ['persisted-queries.md'],
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
    see: ['limits.md#the-document-cache'],
    help: 'heap the shared cache of parsed, validated and compiled documents may hold, each entry weighed by what it holds; only callers with an accepted key or a client token fill it (0: nothing kept)',
    default: '67108864',
  },
  {
    name: 'GRAPHQL_COMPILE_MAX_FIELDS',
    see: ['limits.md#graphql-js-then-graphql-jit'],
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
    see: ['../packages/sandbox/README.md#control-routes-and-who-may-use-them'],
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
    see: ['../packages/sandbox/README.md'],
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
    see: ['observability.md#logs'],
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
    see: ['observability.md#traces'],
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

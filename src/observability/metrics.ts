// Prometheus metrics (prom-client), one registry per app so that several apps
// in one process (tests) do not collide. Hot-path metrics use label children
// cached by their label values; gauges and webhook counters are read from
// their owners only when /metrics is scraped.
import { opendir } from 'node:fs/promises';
import type { IncomingMessage, ServerResponse } from 'node:http';
import { collectDefaultMetrics, Counter, Gauge, Histogram, Registry } from 'prom-client';
import type { SubscriptionCounters } from '../access/subscription-slots.js';
import type { KeyWatchCounters } from '../access/key-watch.js';
import type { PersistedQueryCounters } from '../pipeline/persisted-operations.js';
import type { AccessCounters } from '../realtime/access.js';
import type { EventBus } from '../realtime/bus.js';
import type { FanoutCounters } from '../realtime/fanout.js';
import type { ReadKind, ReconcileCounters } from '../realtime/reconcile.js';
import type { BreakerState } from '../upstream/breaker.js';
import type { Upstream } from '../upstream/clients.js';
import type { UpstreamCallRecord } from '../upstream/http.js';
import type { UpstreamHealth } from '../http/readiness.js';
import type { WebhookCounters } from '../webhooks/receiver.js';
import type { OperationLabel } from './operation-names.js';

export type OperationOutcome = 'ok' | 'partial' | 'error' | 'stream';

const PREFIX = 'delivery_graph_';
const BREAKER_VALUE: Record<BreakerState, number> = { closed: 0, 'half-open': 1, open: 2 };
/** Seconds: a cached read is sub-millisecond, a booking through a slow upstream several seconds. */
const LATENCY_BUCKETS = [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10];
/**
 * The event loop's delay is sampled by a timer due every this many ms: a hold of
 * the loop longer than that always shows, to within that much. prom-client's
 * nodejs_eventloop_lag_* sample every 10 ms, which hides the holds of 5-10 ms
 * this facade is kept under (docs/limits.md).
 */
const LOOP_DELAY_RESOLUTION_MS = 2;

interface Inc {
  inc(value?: number): void;
}
interface Observe {
  observe(value: number): void;
}

export interface Metrics {
  readonly registry: Registry;
  operation(label: OperationLabel, outcome: OperationOutcome, seconds: number | undefined): void;
  upstreamCall(record: UpstreamCallRecord): void;
  /** A reconciliation read made, of this kind, this long after it fell due. */
  reconcileRead(kind: ReadKind, delaySeconds: number): void;
  /** The text GET /metrics answers (Prometheus format), collected a metric per turn of the event loop. */
  text(): Promise<string>;
  /** GET /metrics. */
  handle(req: IncomingMessage, res: ServerResponse): void;
  /** Stops the event-loop sampling timer (the app's tear-down). */
  stop(): void;
}

export interface MetricSources {
  upstream: Upstream;
  bus: EventBus;
  webhooks: WebhookCounters | undefined;
  /** The upstream as the readiness check last found it. */
  upstreamHealth?: () => UpstreamHealth;
  /** Lookups and registrations of persisted queries (APQ and the allowlist). */
  persistedQueries?: PersistedQueryCounters;
  /** Subscriptions' upstream access checks, made and withheld. */
  access?: AccessCounters;
  /** Subscriptions open at once and those refused by a cap (src/access/subscription-slots.ts). */
  subscriptions?: { readonly counters: SubscriptionCounters; readonly open: number };
  /** Reconciliation: reads of followed and unfollowed deliveries and what they found. */
  reconcile?: {
    counters: ReconcileCounters;
    followed: () => number;
    unfinished?: () => number;
    ownerKeys?: () => number;
  };
  /** Re-confirmation of open subscriptions' keys (KEY_RECONFIRM_INTERVAL_MS). */
  keyWatch?: { readonly counters: KeyWatchCounters; readonly keys: number };
  /**
   * Subscription messages executed once per event and group, and handed on to the group's other subscribers
   * (src/realtime/fanout.ts).
   */
  fanout?: { readonly counters: FanoutCounters; readonly groups: number };
  /** The shared cache of parsed, validated and compiled documents (GRAPHQL_CACHE_BYTES). */
  documentCache?: () => { entries: number; bytes: number };
  /**
   * graphql-jit compiles: made, put off by the budget, refused as too large (GRAPHQL_COMPILE_MAX_FIELDS,
   * GRAPHQL_COMPILES_PER_MINUTE).
   */
  compiles?: () => { compiled: number; overBudget: number; tooLarge: number } | undefined;
  /** Owner records: written from reads, failed writes, and those kept in memory. */
  owners?: { counters: { recorded: number; failed: number }; cached: { entries: number; bytes: number } };
  /** The embedded store's filter of uids with an owner record (undefined on Redis). */
  ownerFilter?: () => { bytes: number } | undefined;
}

export function createMetrics(sources: MetricSources): Metrics {
  const registry = new Registry();
  collectDefaultMetrics({ register: registry });
  // Two default collectors cost tens of ms per scrape with thousands of sockets open (bench/probes/stalls.mjs).
  // nodejs_active_handles(_total) make a JS object of every handle: nodejs_active_resources(_total) count the same,
  // from their names.
  for (const name of ['nodejs_active_handles', 'nodejs_active_handles_total']) registry.removeSingleMetric(name);
  // prom-client lists /proc/self/fd synchronously: the same count, listed off the loop.
  if (registry.getSingleMetric('process_open_fds')) {
    registry.removeSingleMetric('process_open_fds');
    new Gauge({
      name: 'process_open_fds',
      help: 'Number of open file descriptors.',
      registers: [registry],
      async collect() {
        try {
          // A thousand entries per read (one array of them all would be one more hold); less the one the listing itself
          // has open.
          let open = -1;
          for await (const _entry of await opendir('/proc/self/fd', { bufferSize: 1024 })) open += 1;
          this.set(open);
        } catch {
          // not Linux after all: no value
        }
      },
    });
  }

  // How late the sampling timer fired, beyond its schedule: the longest time anything held the loop
  // (to within the resolution), and how the loop's turns go. Since the previous scrape, as prom-client's.
  const loopDelay = loopDelaySampler(LOOP_DELAY_RESOLUTION_MS);
  // Read by the first gauge's collect, which runs before the second's (registration order).
  let loopDelayP99 = 0;
  new Gauge({
    name: `${PREFIX}event_loop_delay_max_seconds`,
    help: `Longest the event loop was held since the previous scrape: how late a timer due every ${LOOP_DELAY_RESOLUTION_MS} ms fired at worst (to within ${LOOP_DELAY_RESOLUTION_MS} ms)`,
    registers: [registry],
    collect() {
      const { maxMs, p99Ms } = loopDelay.read();
      this.set(maxMs / 1000);
      loopDelayP99 = p99Ms / 1000;
    },
  });
  new Gauge({
    name: `${PREFIX}event_loop_delay_p99_seconds`,
    help: `99th percentile of how late a timer due every ${LOOP_DELAY_RESOLUTION_MS} ms fired, since the previous scrape`,
    registers: [registry],
    collect() {
      this.set(loopDelayP99);
    },
  });

  const operations = new Counter({
    name: `${PREFIX}graphql_operations_total`,
    help: 'GraphQL operations executed, by operation type, operation name (capped; "anonymous", "other") and outcome (ok, partial: data with errors, error: no data, stream: a subscription started)',
    labelNames: ['type', 'name', 'outcome'] as const,
    registers: [registry],
  });
  const operationSeconds = new Histogram({
    name: `${PREFIX}graphql_operation_duration_seconds`,
    help: 'Execution time of GraphQL queries and mutations (parse and validation excluded), by operation type and name',
    labelNames: ['type', 'name'] as const,
    buckets: LATENCY_BUCKETS,
    registers: [registry],
  });
  const upstreamCalls = new Counter({
    name: `${PREFIX}upstream_requests_total`,
    help: 'Upstream calls (retries included in one call), by endpoint group, method, route template and outcome ("ok" or the error code)',
    labelNames: ['group', 'method', 'route', 'outcome'] as const,
    registers: [registry],
  });
  const upstreamSeconds = new Histogram({
    name: `${PREFIX}upstream_request_duration_seconds`,
    help: 'Upstream call latency, retries included, by endpoint group, method and route template',
    labelNames: ['group', 'method', 'route'] as const,
    buckets: LATENCY_BUCKETS,
    registers: [registry],
  });
  new Gauge({
    name: `${PREFIX}upstream_breaker_state`,
    help: 'Circuit breaker of each upstream endpoint group: 0 closed, 1 half-open, 2 open',
    labelNames: ['group'] as const,
    registers: [registry],
    collect() {
      for (const [group, state] of Object.entries(sources.upstream.breakerState()))
        this.set({ group }, BREAKER_VALUE[state]);
    },
  });
  new Counter({
    name: `${PREFIX}webhooks_total`,
    help: 'Webhook deliveries received, by result: accepted (stored), duplicate (already stored), stale (stored, older than the current state), rejected (answered 4xx/5xx)',
    labelNames: ['result'] as const,
    registers: [registry],
    collect() {
      const counters = sources.webhooks;
      if (!counters) return;
      this.reset();
      for (const result of ['accepted', 'duplicate', 'stale', 'rejected'] as const)
        this.inc({ result }, counters[result]);
    },
  });
  new Counter({
    name: `${PREFIX}webhook_refusals_total`,
    help: 'Webhook requests refused, by HTTP status: 400 malformed event, 401 unverifiable token, 408 headers or body too slow, 413 body too large, 431 token over WEBHOOK_MAX_TOKEN_BYTES (refused by the HTTP server), 503 not stored',
    labelNames: ['status'] as const,
    registers: [registry],
    collect() {
      const counters = sources.webhooks;
      if (!counters) return;
      this.reset();
      for (const [status, count] of counters.refusals) this.inc({ status: String(status) }, count);
    },
  });
  new Counter({
    name: `${PREFIX}persisted_queries_total`,
    help: 'Operations named by hash (extensions.persistedQuery), by result: hit (the hash was known), miss (PersistedQueryNotFound), registered (a query sent with its hash was remembered), unregistered (it ran but was not remembered: the caller was not a merchant key the upstream accepted, a client token included)',
    labelNames: ['result'] as const,
    registers: [registry],
    collect() {
      const counters = sources.persistedQueries;
      if (!counters) return;
      this.reset();
      this.inc({ result: 'hit' }, counters.hits);
      this.inc({ result: 'miss' }, counters.misses);
      this.inc({ result: 'registered' }, counters.registrations);
      this.inc({ result: 'unregistered' }, counters.refused);
    },
  });
  new Counter({
    name: `${PREFIX}graphql_compiles_total`,
    help: 'graphql-jit compiles of operation plans, by result: compiled, over_budget (put off: GRAPHQL_COMPILES_PER_MINUTE spent for the process or the key; a later run may compile), too_large (more fields than GRAPHQL_COMPILE_MAX_FIELDS: runs on graphql-js for good). Only accepted merchant keys compile',
    labelNames: ['result'] as const,
    registers: [registry],
    collect() {
      const counters = sources.compiles?.();
      if (!counters) return;
      this.reset();
      this.inc({ result: 'compiled' }, counters.compiled);
      this.inc({ result: 'over_budget' }, counters.overBudget);
      this.inc({ result: 'too_large' }, counters.tooLarge);
    },
  });
  new Counter({
    name: `${PREFIX}access_checks_total`,
    help: "Upstream access checks (may this key see this delivery?) for deliveries with no owner record: one or two upstream reads each, and one unit of the key's RATE_LIMIT_PER_MINUTE when a subscription makes it; by outcome: allowed, denied, failed (the upstream could not say)",
    labelNames: ['outcome'] as const,
    registers: [registry],
    collect() {
      const counters = sources.access;
      if (!counters) return;
      this.reset();
      for (const outcome of ['allowed', 'denied', 'failed'] as const) this.inc({ outcome }, counters.checks[outcome]);
    },
  });
  new Counter({
    name: `${PREFIX}access_checks_withheld_total`,
    help: "Upstream access checks a subscription did not make, for deliveries with no owner record: a deliveryEvents without uids skips that event undelivered, a subscription naming the uid is refused RATE_LIMITED; by reason: subscription (its SUBSCRIPTION_ACCESS_CHECKS of the minute spent), rate_limit (the key's RATE_LIMIT_PER_MINUTE spent)",
    labelNames: ['reason'] as const,
    registers: [registry],
    collect() {
      const counters = sources.access;
      if (!counters) return;
      this.reset();
      for (const reason of ['subscription', 'rate_limit'] as const) this.inc({ reason }, counters.withheld[reason]);
    },
  });
  new Counter({
    name: `${PREFIX}subscription_refusals_total`,
    help: 'Subscriptions (and, for socket, any operation) refused TOO_MANY_SUBSCRIPTIONS before they started, by the cap that was full: socket (WS_MAX_SUBSCRIPTIONS), key (SUBSCRIPTIONS_PER_KEY), client_token (SUBSCRIPTIONS_PER_CLIENT_TOKEN), address (SUBSCRIPTIONS_PER_ADDRESS)',
    labelNames: ['cap'] as const,
    registers: [registry],
    collect() {
      const slots = sources.subscriptions;
      if (!slots) return;
      this.reset();
      for (const cap of ['socket', 'key', 'client_token', 'address'] as const)
        this.inc({ cap }, slots.counters.refused[cap]);
    },
  });
  new Gauge({
    name: `${PREFIX}subscriptions_open`,
    help: 'Subscriptions open on this instance, over WebSocket and server-sent events: each holds a slot of SUBSCRIPTIONS_PER_KEY and, as its caller is, SUBSCRIPTIONS_PER_CLIENT_TOKEN and SUBSCRIPTIONS_PER_ADDRESS',
    registers: [registry],
    collect() {
      this.set(sources.subscriptions?.open ?? 0);
    },
  });
  new Counter({
    name: `${PREFIX}subscription_messages_total`,
    help: 'Subscription messages made on this instance, by how: executed (an event executed and serialized once for every subscriber with the same operation, variables and merchant key or client-token scope), shared (that message handed to another of those subscribers without executing it again)',
    labelNames: ['made'] as const,
    registers: [registry],
    collect() {
      const counters = sources.fanout?.counters;
      if (!counters) return;
      this.reset();
      this.inc({ made: 'executed' }, counters.executions);
      this.inc({ made: 'shared' }, counters.shared);
    },
  });
  new Gauge({
    name: `${PREFIX}subscription_message_groups`,
    help: 'Groups of subscribers on this instance whose messages are executed once for all of them: one per operation, variables and merchant key (or client-token scope) with a subscriber',
    registers: [registry],
    collect() {
      this.set(sources.fanout?.groups ?? 0);
    },
  });
  new Counter({
    name: `${PREFIX}reconcile_total`,
    help: 'Reconciliation (RECONCILE_INTERVAL_MS, RECONCILE_UNFOLLOWED_INTERVAL_MS): reads of the upstream, by result: read (reads made, of every kind), change (events stored from a read that webhooks had not brought), error (reads that failed and back off), refused (subscriptions ended because the upstream refused their key)',
    labelNames: ['result'] as const,
    registers: [registry],
    collect() {
      const counters = sources.reconcile?.counters;
      if (!counters) return;
      this.reset();
      this.inc({ result: 'read' }, counters.reads);
      this.inc({ result: 'change' }, counters.changes);
      this.inc({ result: 'error' }, counters.errors);
      this.inc({ result: 'refused' }, counters.refused);
    },
  });
  new Counter({
    name: `${PREFIX}key_reconfirmations_total`,
    help: "Re-confirmations of the keys of open subscriptions (KEY_RECONFIRM_INTERVAL_MS), at most one per key per interval, by result: accepted, refused (by both endpoint groups: the key's subscriptions end UNAUTHENTICATED), failed (the upstream could not say; nothing ends) — each one upstream availability call, two when the first group refuses; proven: none asked, another call had proved the key within the interval",
    labelNames: ['result'] as const,
    registers: [registry],
    collect() {
      const counters = sources.keyWatch?.counters;
      if (!counters) return;
      this.reset();
      for (const result of ['accepted', 'refused', 'failed'] as const)
        this.inc({ result }, counters.confirmations[result]);
      this.inc({ result: 'proven' }, counters.proven);
    },
  });
  new Counter({
    name: `${PREFIX}key_refused_subscriptions_total`,
    help: "Subscriptions ended UNAUTHENTICATED because a re-confirmation found their key (a client token's: its merchant key) refused by the upstream",
    registers: [registry],
    collect() {
      const counters = sources.keyWatch?.counters;
      if (!counters) return;
      this.reset();
      this.inc(counters.ended);
    },
  });
  new Gauge({
    name: `${PREFIX}key_reconfirm_keys`,
    help: 'Keys with an open subscription on this instance: each is re-confirmed with the upstream at least once per KEY_RECONFIRM_INTERVAL_MS',
    registers: [registry],
    collect() {
      this.set(sources.keyWatch?.keys ?? 0);
    },
  });
  new Counter({
    name: `${PREFIX}reconcile_reads_total`,
    help: 'Reconciliation reads made, by why: followed (a delivery a subscriber of this instance follows, no event for RECONCILE_INTERVAL_MS), unfollowed (an unfinished delivery nobody follows here, its pass every RECONCILE_UNFOLLOWED_INTERVAL_MS), contradiction (an event contradicted its state), confirmation (the grace of its cancel or failure ended)',
    labelNames: ['kind'] as const,
    registers: [registry],
    collect() {
      const counters = sources.reconcile?.counters;
      if (!counters) return;
      this.reset();
      for (const kind of ['followed', 'unfollowed', 'contradiction', 'confirmation'] as const)
        this.inc({ kind }, counters.byKind[kind]);
    },
  });
  const reconcileDelay = new Histogram({
    name: `${PREFIX}reconcile_queue_delay_seconds`,
    help: 'How long after it fell due each reconciliation read was made, by kind (as reconcile_reads_total): what RECONCILE_MAX_READS_PER_SECOND and the turns between merchants hold it back',
    labelNames: ['kind'] as const,
    buckets: [0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900],
    registers: [registry],
  });
  new Gauge({
    name: `${PREFIX}reconcile_due_reads`,
    help: 'Reconciliation reads due and not made at the last tick: held back by RECONCILE_MAX_READS_PER_SECOND',
    registers: [registry],
    collect() {
      this.set(sources.reconcile?.counters.due ?? 0);
    },
  });
  new Gauge({
    name: `${PREFIX}reconcile_unfinished_deliveries`,
    help: 'Unfinished deliveries the facade knows (booked or read through it within RECONCILE_UNFOLLOWED_WINDOW), as the last pass of each merchant whose key this process holds found them; those of merchants whose key it does not hold (since a restart, until they call) are not counted, nor read',
    registers: [registry],
    collect() {
      this.set(sources.reconcile?.unfinished?.() ?? 0);
    },
  });
  new Gauge({
    name: `${PREFIX}reconcile_owner_keys`,
    help: 'Merchants whose key this process holds in memory (never stored, logged or exported): those whose unfinished deliveries it can read unfollowed',
    registers: [registry],
    collect() {
      this.set(sources.reconcile?.ownerKeys?.() ?? 0);
    },
  });
  new Counter({
    name: `${PREFIX}reconcile_keys_dropped_total`,
    help: "Merchant keys dropped from memory because the upstream refused them on an unfollowed read: that merchant's deliveries wait until it calls with a key the upstream accepts",
    registers: [registry],
    collect() {
      const counters = sources.reconcile?.counters;
      if (!counters) return;
      this.reset();
      this.inc(counters.keysDropped);
    },
  });
  new Gauge({
    name: `${PREFIX}reconcile_followed_deliveries`,
    help: 'Deliveries a live subscriber of this instance follows: each is read from the upstream when no event has come for RECONCILE_INTERVAL_MS',
    registers: [registry],
    collect() {
      this.set(sources.reconcile?.followed() ?? 0);
    },
  });
  new Gauge({
    name: `${PREFIX}upstream_up`,
    help: 'The upstream as the background check last found it: 1 up (it answered, a 401 included), 0 down (unreachable, timing out, 5xx), -1 not checked yet. Readiness never depends on it',
    registers: [registry],
    collect() {
      const state = sources.upstreamHealth?.().state ?? 'unknown';
      this.set(state === 'up' ? 1 : state === 'down' ? 0 : -1);
    },
  });
  new Counter({
    name: `${PREFIX}owner_records_learned_total`,
    help: 'Owner records written outside a booking (booked deliveries are recorded at booking): a proof (a read by partner reference, a cancel) or, on a key-scoped upstream, a read the upstream allowed; by result: written, failed (the answer stood; the next read asks the upstream again)',
    labelNames: ['result'] as const,
    registers: [registry],
    collect() {
      const owners = sources.owners;
      if (!owners) return;
      this.reset();
      this.inc({ result: 'written' }, owners.counters.recorded);
      this.inc({ result: 'failed' }, owners.counters.failed);
    },
  });
  new Gauge({
    name: `${PREFIX}owner_cache_bytes`,
    help: 'Heap the owner records kept in memory hold by their own estimate; at most 8 MiB (OWNER_CACHE_BYTES in src/access/owners.ts)',
    registers: [registry],
    collect() {
      this.set(sources.owners?.cached.bytes ?? 0);
    },
  });
  new Gauge({
    name: `${PREFIX}owner_filter_bytes`,
    help: 'Bytes of the embedded store\'s filter of uids with an owner record (src/store/uid-filter.ts), which answers "no record" without a query; at most 8 MiB, 16 while a larger one is filled. 0 on Redis',
    registers: [registry],
    collect() {
      this.set(sources.ownerFilter?.()?.bytes ?? 0);
    },
  });
  new Gauge({
    name: `${PREFIX}document_cache_bytes`,
    help: 'Heap the shared document cache holds, each entry weighed from what it holds (text, syntax tree tokens and nodes, plans, validation errors, generated source of compiled executors); at most GRAPHQL_CACHE_BYTES. Only callers with an accepted key or a client token fill it',
    registers: [registry],
    collect() {
      this.set(sources.documentCache?.().bytes ?? 0);
    },
  });
  new Gauge({
    name: `${PREFIX}document_cache_entries`,
    help: 'Distinct query texts in the shared document cache',
    registers: [registry],
    collect() {
      this.set(sources.documentCache?.().entries ?? 0);
    },
  });
  new Gauge({
    name: `${PREFIX}subscribers`,
    help: 'Live subscription listeners on the event bus of this instance',
    registers: [registry],
    collect() {
      this.set(sources.bus.listenerCount());
    },
  });

  // Label children cached by their values: one Map lookup per observation instead of prom-client's label hashing setup.
  const counters = new Map<string, Inc>();
  const histograms = new Map<string, Observe>();
  const counterOf = (key: string, make: () => Inc): Inc => {
    let child = counters.get(key);
    if (!child) counters.set(key, (child = make()));
    return child;
  };
  const histogramOf = (key: string, make: () => Observe): Observe => {
    let child = histograms.get(key);
    if (!child) histograms.set(key, (child = make()));
    return child;
  };

  return {
    registry,
    stop: () => loopDelay.stop(),
    text: () => metricsText(registry),
    operation(label, outcome, seconds) {
      counterOf(`op\n${label.type}\n${label.name}\n${outcome}`, () =>
        operations.labels({ type: label.type, name: label.name, outcome }),
      ).inc();
      if (seconds !== undefined) {
        histogramOf(`op\n${label.type}\n${label.name}`, () =>
          operationSeconds.labels({ type: label.type, name: label.name }),
        ).observe(seconds);
      }
    },
    upstreamCall(record) {
      const { group, method, route, outcome } = record;
      counterOf(`up\n${group}\n${method}\n${route}\n${outcome}`, () =>
        upstreamCalls.labels({ group, method, route, outcome }),
      ).inc();
      histogramOf(`up\n${group}\n${method}\n${route}`, () => upstreamSeconds.labels({ group, method, route })).observe(
        record.durationMs / 1000,
      );
    },
    reconcileRead(kind, delaySeconds) {
      histogramOf(`rc\n${kind}`, () => reconcileDelay.labels({ kind })).observe(delaySeconds);
    },
    handle(req, res) {
      if (req.method !== 'GET' && req.method !== 'HEAD') {
        res
          .writeHead(405, { allow: 'GET, HEAD', 'content-type': 'application/json' })
          .end('{"error":"method_not_allowed","message":"/metrics answers GET and HEAD only."}');
        return;
      }
      metricsText(registry).then(
        (text) =>
          res
            .writeHead(200, { 'content-type': registry.contentType, 'cache-control': 'no-store' })
            .end(req.method === 'HEAD' ? undefined : text),
        () =>
          res
            .writeHead(500, { 'content-type': 'application/json' })
            .end(
              '{"error":"metrics_unavailable","message":"The metrics could not be collected this time; try again."}',
            ),
      );
    },
  };
}

/** Steps of the sampler's histogram, ms, and how many (200 ms; the delays beyond are counted in one more). */
const LOOP_DELAY_STEP_MS = 0.1;
const LOOP_DELAY_STEPS = 2_000;

/**
 * A timer due every `resolutionMs`: how late it fired each time, the longest and
 * a histogram (for the p99) since the last read. In JavaScript, not perf_hooks'
 * monitorEventLoopDelay: that one's reset() forgets when its timer last fired, so
 * a hold just after a read (a scrape) was never counted.
 */
function loopDelaySampler(resolutionMs: number): { read(): { maxMs: number; p99Ms: number }; stop(): void } {
  const counts = new Uint32Array(LOOP_DELAY_STEPS + 1);
  let samples = 0;
  let maxMs = 0;
  let last = performance.now();
  const timer = setInterval(() => {
    const now = performance.now();
    const late = Math.max(0, now - last - resolutionMs);
    last = now;
    counts[Math.min(LOOP_DELAY_STEPS, Math.floor(late / LOOP_DELAY_STEP_MS))]! += 1;
    samples += 1;
    if (late > maxMs) maxMs = late;
  }, resolutionMs);
  // The sampler alone must not keep a process alive.
  timer.unref();
  return {
    read() {
      let p99Ms = 0;
      for (let step = 0, seen = 0; step <= LOOP_DELAY_STEPS && samples > 0; step += 1) {
        seen += counts[step]!;
        if (seen >= samples * 0.99) {
          // Its step's upper bound; in the last step (past 200 ms), the longest.
          p99Ms = step === LOOP_DELAY_STEPS ? maxMs : Math.min(maxMs, (step + 1) * LOOP_DELAY_STEP_MS);
          break;
        }
      }
      const read = { maxMs, p99Ms };
      counts.fill(0);
      samples = 0;
      maxMs = 0;
      return read;
    },
    stop: () => clearInterval(timer),
  };
}

const nextTurn = () => new Promise<void>((resolve) => setImmediate(resolve));

/**
 * The registry's text, as registry.metrics() writes it, collected a metric per
 * turn of the event loop: registry.metrics() runs every collector in one turn,
 * and with thousands of sockets open the default ones (handles, resources) take
 * milliseconds each (bench/probes/stalls.mjs). Requests go on between two.
 */
async function metricsText(registry: Registry): Promise<string> {
  const parts: string[] = [];
  for (const { name } of registry.getMetricsAsArray()) {
    parts.push(await registry.getSingleMetricAsString(name));
    await nextTurn();
  }
  return `${parts.join('\n\n')}\n`;
}

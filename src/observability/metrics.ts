// Prometheus metrics (prom-client), one registry per app so that several apps
// in one process (tests) do not collide. What the hot path records (operations,
// upstream calls, reconciliation reads) goes through prom-client's own
// inc/observe with its labels; everything else is read from its owner only when
// /metrics is scraped (collected-metrics.ts).
import { opendir } from 'node:fs/promises';
import type { IncomingMessage, ServerResponse } from 'node:http';
import { collectDefaultMetrics, Counter, Gauge, Histogram, Registry } from 'prom-client';
import { PREFIX, registerCollectedMetrics } from './collected-metrics.js';
import { registerLoopDelay } from './loop-delay.js';
import type { SubscriptionCounters } from '../access/subscription-slots.js';
import type { KeyWatchCounters } from '../access/key-watch.js';
import type { PersistedQueryCounters } from '../pipeline/persisted-operations.js';
import type { AccessCounters } from '../realtime/access.js';
import type { EventBus } from '../realtime/bus.js';
import type { FanoutCounters } from '../realtime/fanout.js';
import type { ReadKind, ReconcileCounters } from '../realtime/reconcile.js';
import type { Upstream } from '../upstream/clients.js';
import type { UpstreamCallRecord } from '../upstream/http.js';
import type { UpstreamHealth } from '../http/readiness.js';
import type { WebhookCounters } from '../webhooks/receiver.js';
import type { OperationLabel } from './operation-names.js';

export type OperationOutcome = 'ok' | 'partial' | 'error' | 'stream';

/** Seconds: a cached read is sub-millisecond, a booking through a slow upstream several seconds. */
const LATENCY_BUCKETS = [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10];

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
}

/** prom-client's default metrics, less the collectors that cost too much per scrape with many sockets open. */
function registerProcessMetrics(registry: Registry): void {
  collectDefaultMetrics({ register: registry });
  // Two default collectors cost tens of ms per scrape with thousands of sockets open (bench/probes/stalls.mjs).
  // nodejs_active_handles(_total) make a JS object of every handle: nodejs_active_resources(_total) count the same,
  // from their names.
  for (const name of ['nodejs_active_handles', 'nodejs_active_handles_total']) registry.removeSingleMetric(name);
  // prom-client lists /proc/self/fd synchronously: the same count, listed off the loop.
  if (!registry.getSingleMetric('process_open_fds')) return;
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

/** The metrics the hot path records into: operations, upstream calls, reconciliation reads. */
function registerRecorded(registry: Registry) {
  return {
    operations: new Counter({
      name: `${PREFIX}graphql_operations_total`,
      help: 'GraphQL operations executed, by operation type, operation name (capped; "anonymous", "other") and outcome (ok, partial: data with errors, error: no data, stream: a subscription started)',
      labelNames: ['type', 'name', 'outcome'] as const,
      registers: [registry],
    }),
    operationSeconds: new Histogram({
      name: `${PREFIX}graphql_operation_duration_seconds`,
      help: 'Execution time of GraphQL queries and mutations (parse and validation excluded), by operation type and name',
      labelNames: ['type', 'name'] as const,
      buckets: LATENCY_BUCKETS,
      registers: [registry],
    }),
    upstreamCalls: new Counter({
      name: `${PREFIX}upstream_requests_total`,
      help: 'Upstream calls (retries included in one call), by endpoint group, method, route template and outcome ("ok" or the error code)',
      labelNames: ['group', 'method', 'route', 'outcome'] as const,
      registers: [registry],
    }),
    upstreamSeconds: new Histogram({
      name: `${PREFIX}upstream_request_duration_seconds`,
      help: 'Upstream call latency, retries included, by endpoint group, method and route template',
      labelNames: ['group', 'method', 'route'] as const,
      buckets: LATENCY_BUCKETS,
      registers: [registry],
    }),
    reconcileDelay: new Histogram({
      name: `${PREFIX}reconcile_queue_delay_seconds`,
      help: 'How long after it fell due each reconciliation read was made, by kind (as reconcile_reads_total): what RECONCILE_MAX_READS_PER_SECOND and the turns between merchants hold it back',
      labelNames: ['kind'] as const,
      buckets: [0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900],
      registers: [registry],
    }),
  };
}

/** GET /metrics (HEAD too): the registry's text, collected a metric per turn of the event loop. */
function serveMetrics(registry: Registry, req: IncomingMessage, res: ServerResponse): void {
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
        .end('{"error":"metrics_unavailable","message":"The metrics could not be collected this time; try again."}'),
  );
}

export function createMetrics(sources: MetricSources): Metrics {
  const registry = new Registry();
  registerProcessMetrics(registry);
  const stopLoopDelay = registerLoopDelay(registry);
  const recorded = registerRecorded(registry);
  registerCollectedMetrics(registry, sources);
  return {
    registry,
    stop: stopLoopDelay,
    text: () => metricsText(registry),
    operation({ type, name }, outcome, seconds) {
      recorded.operations.inc({ type, name, outcome });
      if (seconds !== undefined) recorded.operationSeconds.observe({ type, name }, seconds);
    },
    upstreamCall({ group, method, route, outcome, durationMs }) {
      recorded.upstreamCalls.inc({ group, method, route, outcome });
      recorded.upstreamSeconds.observe({ group, method, route }, durationMs / 1000);
    },
    reconcileRead(kind, delaySeconds) {
      recorded.reconcileDelay.observe({ kind }, delaySeconds);
    },
    handle: (req, res) => serveMetrics(registry, req, res),
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

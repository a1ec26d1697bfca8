// GET /metrics for a running app: which part feeds which counters and gauges; and tracing, when it is on.
// In production /metrics is served only where asked for (METRICS_PORT,
// METRICS_TOKEN): otherwise nothing is collected, and start-up says so.
import type { Config } from '../config.js';
import type { Logger } from '../logger.js';
import type { Teardown } from '../lifecycle.js';
import type { Owners } from '../access/owners.js';
import type { Readiness } from '../http/readiness.js';
import type { PersistedOperations } from '../pipeline/persisted-operations.js';
import type { Pipeline } from '../pipeline/pipeline.js';
import type { EventBus } from '../realtime/bus.js';
import type { Realtime } from '../realtime/start.js';
import type { Upstream } from '../upstream/clients.js';
import type { WebhookReceiver } from '../webhooks/receiver.js';
import { createMetrics, type Metrics } from './metrics.js';
import type { SpanExporterLike, Tracing } from './tracing.js';

/** The parts of the app /metrics reports on. */
export interface MeteredParts {
  upstream: Upstream;
  bus: EventBus;
  receiver: WebhookReceiver | undefined;
  readiness: Readiness;
  persisted: PersistedOperations;
  realtime: Realtime;
  owners: Owners;
  /** The pipeline, once it is made (after the metrics; until then the document cache is empty). */
  pipeline: () => Pipeline | undefined;
}

/** The metrics, unless METRICS=false or nowhere serves them. */
export function startMetrics(
  config: Config,
  logger: Logger,
  teardown: Teardown,
  { upstream, bus, receiver, readiness, persisted, realtime, owners, pipeline }: MeteredParts,
): Metrics | undefined {
  const metricsServed = config.metricsAccess.onMainPort || config.metricsAccess.port !== undefined;
  if (config.metrics && !metricsServed)
    logger.warn(
      '/metrics is off in production: set METRICS_PORT (a listener of its own) or METRICS_TOKEN (a bearer token) to serve it',
    );
  if (!config.metrics || !metricsServed) return undefined;
  const { reconciler } = realtime;
  const metrics = createMetrics({
    upstream,
    bus,
    webhooks: receiver?.counters,
    upstreamHealth: readiness.upstream,
    persistedQueries: persisted.counters,
    access: realtime.access.counters,
    subscriptions: realtime.subscriptions,
    fanout: realtime.fanout,
    owners,
    reconcile: {
      counters: reconciler.counters,
      followed: () => reconciler.followedCount,
      unfinished: () => reconciler.unfinishedCount,
      ownerKeys: () => reconciler.ownerKeyCount,
    },
    keyWatch: realtime.keyWatch,
    documentCache: () => pipeline()?.documents.size ?? { entries: 0, bytes: 0 },
    compiles: () => pipeline()?.documents.compiles,
  });
  // Its event-loop sampler runs until the app stops.
  teardown.add('metrics', () => metrics.stop());
  return metrics;
}

/**
 * OpenTelemetry tracing when it is on, started before anything runs so that its context manager is in place; nothing of
 * it loads when it is off.
 */
export async function startConfiguredTracing(
  config: Config,
  teardown: Teardown,
  spanExporter?: SpanExporterLike,
): Promise<Tracing | undefined> {
  if (!config.tracing.enabled) return undefined;
  const tracing = await (await import('./tracing.js')).startTracing(config.tracing, spanExporter);
  teardown.add('tracing', () => tracing.shutdown());
  return tracing;
}

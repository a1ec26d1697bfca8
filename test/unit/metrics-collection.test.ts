// /metrics is collected a metric per turn of the event loop, so that a scrape
// with thousands of sockets open (whose default collectors take milliseconds
// each) never holds the loop for all of them at once; and it still holds every
// metric, in prom-client's text format.
import { afterEach, describe, expect, it } from 'vitest';
import { createMetrics, type Metrics } from '../../src/observability/metrics.js';
import { createEventBus } from '../../src/realtime/bus.js';
import type { Upstream } from '../../src/upstream/clients.js';

const upstream = { breakerState: () => ({ platform: 'closed', partner: 'closed' }) } as unknown as Upstream;
let metrics: Metrics | undefined;
afterEach(() => metrics?.stop());

describe('a /metrics collection', () => {
  it('lets other work run between its metrics', async () => {
    metrics = createMetrics({ upstream, bus: createEventBus(), webhooks: undefined });
    const order: string[] = [];
    const scrape = metrics.text().then(() => order.push('scrape done'));
    setImmediate(() => order.push('other work'));
    await scrape;
    expect(order).toEqual(['other work', 'scrape done']);
  });

  it('holds every registered metric, in the text format prom-client writes', async () => {
    metrics = createMetrics({ upstream, bus: createEventBus(), webhooks: undefined });
    const text = await metrics.text();
    const types = (body: string) =>
      body
        .split('\n')
        .filter((line) => line.startsWith('# TYPE '))
        .sort();
    // The same registry collected all at once: the same metrics (values move, names do not).
    expect(types(text)).toEqual(types(await metrics.registry.metrics()));
    expect(types(text).length).toBe(metrics.registry.getMetricsAsArray().length);
    expect(text.endsWith('\n')).toBe(true);
    expect(text).toMatch(/^process_open_fds \d+$/m);
    expect(text).toMatch(/^delivery_graph_event_loop_delay_max_seconds \S+$/m);
    // As registry.metrics() separates them: one blank line between two metrics.
    expect(text.split('\n\n').length).toBe(types(text).length);
  });
});

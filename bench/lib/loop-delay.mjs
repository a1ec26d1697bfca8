// The facade's event-loop delay during a measurement, from its own /metrics:
// delivery_graph_event_loop_delay_{max,p99}_seconds (how late a 2 ms timer
// fired, since the previous scrape), or, from a build before those,
// prom-client's nodejs_eventloop_lag_{max,p99}_seconds (a 10 ms timer's whole
// interval: the 10 ms are taken off). A scrape resets the window, so one just
// before a measurement and one just after it bound the window exactly.
// The bench's facades run with METRICS_TOKEN (contenders.mjs): production serves /metrics to it alone.
import { request } from 'undici';
import { fmt } from './report.mjs';

export const METRICS_TOKEN = 'bench-metrics-token';

/** The facade's /metrics text; undefined when it does not answer within 5 s. */
export async function scrapeMetrics(origin) {
  try {
    const response = await request(`${origin}/metrics`, {
      headers: { authorization: `Bearer ${METRICS_TOKEN}` },
      headersTimeout: 5_000,
      bodyTimeout: 5_000,
    });
    const text = await response.body.text();
    return response.statusCode === 200 ? text : undefined;
  } catch {
    return undefined;
  }
}

/** One sample's value (no labels) from a scrape. */
export function metricValue(text, name) {
  const match = new RegExp(`^${name}(?:\\{[^}]*\\})? (\\S+)$`, 'm').exec(text ?? '');
  return match ? Number(match[1]) : undefined;
}

/** { maxMs, p99Ms, resolutionMs } from a scrape, or undefined when it holds neither metric. */
export function loopDelayOf(text) {
  const max = metricValue(text, 'delivery_graph_event_loop_delay_max_seconds');
  if (max !== undefined)
    return {
      maxMs: max * 1000,
      p99Ms: (metricValue(text, 'delivery_graph_event_loop_delay_p99_seconds') ?? NaN) * 1000,
      resolutionMs: 2,
    };
  const lagMax = metricValue(text, 'nodejs_eventloop_lag_max_seconds');
  if (lagMax === undefined) return undefined;
  const late = (seconds) => Math.max(0, seconds * 1000 - 10);
  return {
    maxMs: late(lagMax),
    p99Ms: late(metricValue(text, 'nodejs_eventloop_lag_p99_seconds') ?? NaN),
    resolutionMs: 10,
  };
}

/**
 * Starts a window on each facade ({ name, origin }): scrapes it now (which
 * resets its window); `stop()` scrapes again and resolves with each one's delay
 * over the window, by name (undefined for one that did not answer).
 */
export async function loopDelayWindow(facades) {
  await Promise.all(facades.map(({ origin }) => scrapeMetrics(origin)));
  return {
    async stop() {
      const texts = await Promise.all(facades.map(({ origin }) => scrapeMetrics(origin)));
      return Object.fromEntries(facades.map(({ name }, k) => [name, loopDelayOf(texts[k])]));
    },
  };
}

/** The largest of several windows' delays (max of the maxima, max of the p99s). */
export function worstLoopDelay(delays) {
  const known = delays.filter(Boolean);
  if (known.length === 0) return undefined;
  return {
    maxMs: Math.max(...known.map((d) => d.maxMs)),
    p99Ms: Math.max(...known.map((d) => d.p99Ms)),
    resolutionMs: Math.max(...known.map((d) => d.resolutionMs)),
  };
}

/** "max 3.1 / p99 1.2 ms" (with the resolution when it is not the facade's 2 ms). */
export function describeLoopDelay(delay) {
  if (!delay) return 'n/a (no /metrics)';
  return `max ${fmt(delay.maxMs, 1)} / p99 ${fmt(delay.p99Ms, 1)} ms${delay.resolutionMs !== 2 ? ` (sampled every ${delay.resolutionMs} ms)` : ''}`;
}

/** "facade max 3.1 / p99 1.2 ms; baseline …" for several facades' windows, by name. */
export function describeLoopDelays(byName) {
  return Object.entries(byName)
    .map(([name, delay]) => `${name} ${describeLoopDelay(delay)}`)
    .join('; ');
}

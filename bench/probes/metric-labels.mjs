// What recording one upstream call in /metrics costs (a counter and a histogram, four and three labels), three ways
// side by side in one process: prom-client's own inc/observe with the labels (what src/observability/metrics.ts does),
// its labels() child asked each time, and the children cached by a key joined from the label values (what metrics.ts
// did before: docs/architecture.md, "Mechanisms beside a library's own"). Usage: node
// bench/probes/metric-labels.mjs [--calls=500000] [--rounds=3]
import { Counter, Histogram, Registry } from 'prom-client';
import { probeFlags } from '../scenarios/single-read.mjs';

const flags = probeFlags();
const calls = Number(flags.calls ?? 500_000);
const rounds = Number(flags.rounds ?? 3);
const registry = new Registry();
const BUCKETS = [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10];
const metricsOf = (n) => ({
  calls: new Counter({
    name: `calls_${n}`,
    help: 'calls',
    labelNames: ['group', 'method', 'route', 'outcome'],
    registers: [registry],
  }),
  seconds: new Histogram({
    name: `seconds_${n}`,
    help: 'seconds',
    labelNames: ['group', 'method', 'route'],
    buckets: BUCKETS,
    registers: [registry],
  }),
});

const own = metricsOf('own');
const viaLabels = metricsOf('labels');
const cached = metricsOf('cached');
const counters = new Map();
const histograms = new Map();
const WAYS = {
  "prom-client's inc/observe with labels": ({ group, method, route, outcome, durationMs }) => {
    own.calls.inc({ group, method, route, outcome });
    own.seconds.observe({ group, method, route }, durationMs / 1000);
  },
  'labels() asked each time': ({ group, method, route, outcome, durationMs }) => {
    viaLabels.calls.labels({ group, method, route, outcome }).inc();
    viaLabels.seconds.labels({ group, method, route }).observe(durationMs / 1000);
  },
  'children cached by a joined key': ({ group, method, route, outcome, durationMs }) => {
    const counterKey = `up\n${group}\n${method}\n${route}\n${outcome}`;
    let counter = counters.get(counterKey);
    if (!counter) counters.set(counterKey, (counter = cached.calls.labels({ group, method, route, outcome })));
    counter.inc();
    const histogramKey = `up\n${group}\n${method}\n${route}`;
    let histogram = histograms.get(histogramKey);
    if (!histogram) histograms.set(histogramKey, (histogram = cached.seconds.labels({ group, method, route })));
    histogram.observe(durationMs / 1000);
  },
};
const record = { group: 'platform', method: 'GET', route: '/{platform}/deliveries/{uid}', status: 200, outcome: 'ok' };
const results = Object.fromEntries(Object.keys(WAYS).map((name) => [name, []]));
for (let round = 0; round < rounds; round += 1) {
  for (const [name, recordCall] of Object.entries(WAYS)) {
    for (let i = 0; i < calls / 5; i += 1) recordCall({ ...record, durationMs: i % 50 });
    const started = performance.now();
    for (let i = 0; i < calls; i += 1) recordCall({ ...record, durationMs: i % 50 });
    results[name].push(((performance.now() - started) * 1000) / calls);
  }
}
console.log(`| way | µs per call recorded (${rounds} rounds of ${calls}, the ways alternating) |\n| --- | --- |`);
for (const [name, us] of Object.entries(results))
  console.log(`| ${name} | ${us.map((v) => v.toFixed(2)).join(', ')} |`);

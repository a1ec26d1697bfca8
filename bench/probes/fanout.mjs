// What one delivered message costs the facade when many watch the same
// delivery: graphql-ws subscribers (one `deliveryEvents(uids:)` subscription a
// connection, `--per-delivery` to each delivery) in `--workers` processes of
// their own, signed webhooks (signed ahead) posted open loop at `--rate` from
// another, after a warm-up at the same rate not counted. Prints the facade's CPU
// time over all its threads (/proc/<pid>/stat) per message delivered (one event
// reaching one subscriber), the latency from post to message, and losses; with
// --baseline, the same for another checkout's build in the same run, the two
// alternating `--runs` times.
//
//   npm run build && node bench/probes/fanout.mjs [--deliveries=100] [--per-delivery=10]
//     [--rate=500] [--seconds=5] [--workers=1] [--runs=1] [--baseline=/path/to/an/older/checkout]
//
// 1,000 subscribers at 500 events/s:  --deliveries=100 --per-delivery=10 --rate=500
// 10,000 subscribers at 100 events/s: --deliveries=100 --per-delivery=100 --rate=100 --workers=4
import path from 'node:path';
import { parseArgs } from 'node:util';
import { FACADE_ENTRY, startFacade, startUpstream } from '../lib/contenders.mjs';
import { cpuMs } from '../lib/cpu.mjs';
import { keyPair } from '../lib/webhooks.mjs';
import { forkWorker } from '../lib/worker.mjs';

const { values } = parseArgs({
  options: {
    deliveries: { type: 'string', default: '100' },
    'per-delivery': { type: 'string', default: '10' },
    rate: { type: 'string', default: '500' },
    seconds: { type: 'string', default: '5' },
    'warm-seconds': { type: 'string', default: '2' },
    workers: { type: 'string', default: '1' },
    runs: { type: 'string', default: '1' },
    baseline: { type: 'string' },
  },
});
const DELIVERIES = Number(values.deliveries);
const PER_DELIVERY = Number(values['per-delivery']);
const RATE = Number(values.rate);
const SECONDS = Number(values.seconds);
const WARM_SECONDS = Number(values['warm-seconds']);
const WORKERS = Number(values.workers);
const RUNS = Number(values.runs);
const SUBSCRIBERS = DELIVERIES * PER_DELIVERY;
/** The fixed upstream answers any key. */
const KEY = 'sk_bench_merchant';
if (!Number.isInteger(PER_DELIVERY / WORKERS))
  throw new Error('--per-delivery must be a multiple of --workers (each worker follows every delivery alike)');

const uidOf = (d) => `00000000-0000-4000-9200-${String(d).padStart(12, '0')}`;

async function measure(upstream, keys, { entry, cwd, label }) {
  const facade = await startFacade(upstream.url, { publicKeyPem: keys.publicKeyPem, entry, cwd, label });
  const uids = Array.from({ length: DELIVERIES }, (_, d) => uidOf(d));
  const fleet = Array.from({ length: WORKERS }, () => forkWorker('subscribers'));
  const poster = forkWorker('webhook-poster');
  const perWorker = SUBSCRIBERS / WORKERS;
  const perWorkerPerEvent = PER_DELIVERY / WORKERS;
  const stream = (tag, count) =>
    Array.from({ length: count }, (_, n) => ({
      uid: uids[n % DELIVERIES],
      event_name: 'delivery.dropoff_enroute',
      status: `${tag}${n}`,
    }));
  try {
    await Promise.all([
      ...fleet.map((worker) => worker.call('connect', { origin: facade.origin, key: KEY, count: perWorker, uids })),
      (async () => {
        await poster.call('init', { origin: facade.origin, privateKeyPem: keys.privateKeyPem });
        await poster.call('prepare', {
          name: 'warm-up',
          events: uids.map((uid) => ({ uid, event_name: 'delivery.created', status: 'warm-up' })),
        });
        await poster.call('prepare', { name: 'warm-run', events: stream('w', Math.round(WARM_SECONDS * RATE)) });
        await poster.call('prepare', { name: 'run', events: stream('e', Math.round(SECONDS * RATE)) });
      })(),
    ]);
    await poster.call('burst', { name: 'warm-up' });
    for (const worker of fleet) {
      const warm = await worker.call('waitForTag', { tag: 'warm-up', count: perWorker, timeoutMs: 120_000 });
      if (warm.timedOut)
        throw new Error(`${label}: only ${warm.count} of ${perWorker} subscribers of a worker got the warm-up event`);
    }
    const receivedOf = async () =>
      (await Promise.all(fleet.map((worker) => worker.call('received')))).reduce((sum, n) => sum + n, 0);
    const waitAll = (before, acknowledged) =>
      Promise.all(
        fleet.map((worker, k) =>
          worker.call('waitFor', { count: before[k] + acknowledged * perWorkerPerEvent, timeoutMs: 60_000 }),
        ),
      );
    // At the rate, not counted: the code paths of both sides are compiled before the run.
    let before = await Promise.all(fleet.map((worker) => worker.call('received')));
    const warmRun = await poster.call('openLoop', { name: 'warm-run', rate: RATE });
    await waitAll(before, warmRun.acknowledged);

    before = await Promise.all(fleet.map((worker) => worker.call('received')));
    const receivedBefore = before.reduce((sum, n) => sum + n, 0);
    const cpuBefore = cpuMs(facade.child.pid);
    const started = performance.now();
    const run = await poster.call('openLoop', { name: 'run', rate: RATE });
    const arrived = await waitAll(before, run.acknowledged);
    const wall = performance.now() - started;
    const cpuUsed = cpuMs(facade.child.pid) - cpuBefore;
    const delivered = (await receivedOf()) - receivedBefore;
    const latencies = await Promise.all(
      fleet.map((worker) =>
        worker.call('latencies', { prefix: 'e', sentAt: run.sentAt, acked: run.acked, slowMs: 50 }),
      ),
    );
    const lost = latencies.reduce((sum, l) => sum + l.lost, 0);
    return {
      label,
      subscribers: SUBSCRIBERS,
      eventsPerSecond: RATE,
      messages: delivered,
      lost,
      duplicates: latencies.reduce((sum, l) => sum + l.duplicates + l.misrouted, 0),
      webhooksFailed: run.failed,
      timedOut: arrived.some((a) => a.timedOut),
      p50Ms: Math.max(...latencies.map((l) => l.p50)),
      p99Ms: Math.max(...latencies.map((l) => l.p99)),
      facadeCpuMs: Math.round(cpuUsed),
      facadeCorePercent: Math.round((100 * cpuUsed) / wall),
      microsecondsPerMessage: Math.round((cpuUsed * 1000) / delivered),
      rssMiB: Math.round(facade.rssKb() / 1024),
    };
  } finally {
    await Promise.all(fleet.map((worker) => worker.call('close').catch(() => undefined)));
    await poster.call('close').catch(() => undefined);
    await Promise.all([...fleet.map((worker) => worker.stop()), poster.stop()]);
    await facade.stop();
  }
}

const upstream = await startUpstream();
const keys = keyPair();
const contenders = [{ label: 'this build', entry: FACADE_ENTRY, cwd: undefined }];
if (values.baseline) {
  const dir = path.resolve(values.baseline);
  contenders.unshift({ label: `baseline (${path.basename(dir)})`, entry: path.join(dir, 'dist/main.js'), cwd: dir });
}
const results = [];
for (let run = 0; run < RUNS; run += 1) {
  for (const contender of contenders) {
    const result = await measure(upstream, keys, contender);
    console.log(JSON.stringify(result));
    results.push(result);
  }
}
await upstream.stop?.();
upstream.child?.kill();

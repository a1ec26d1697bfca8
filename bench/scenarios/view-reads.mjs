// Reads answered from the stored view (issue 40), against a fixed-response upstream that counts what it serves:
// (a) a polling backend: 1,000 deliveries with a webhook every 5 s each, all read every 10 s in batches of 100; upstream
//     GETs per 1,000 delivery reads;
// (b) 1,000 delivered deliveries read again and again after their confirming read: upstream GETs;
// (d) CPU per read served from the view against a plain undici reverse proxy's per proxied read (max throughput, one
//     delivered uid), and the p99 of reads from the view at 200 req/s.
// With --baseline=<checkout> (a build from before the view answered reads), (a) and (b) run on it too, one after the
// other on the same upstream. (c), the single read of a fresh uid, is the single-read scenario with --baseline.
import { join, resolve, basename } from 'node:path';
import { startFacade, startReverseProxy, startUpstream } from '../lib/contenders.mjs';
import { cpuMeter } from '../lib/cpu.mjs';
import { DELIVERED_PREFIX, PLATFORM_ID } from '../lib/fixed-upstream.mjs';
import { fmt, table, thousands, writeSection } from '../lib/report.mjs';
import { sleep } from '../lib/proc.mjs';
import { keyPair } from '../lib/webhooks.mjs';
import { forkWorker } from '../lib/worker.mjs';
import { FACADE_SINGLE_READ, KEY } from './single-read.mjs';

const DELIVERIES = 1_000;
const BATCH = 100;
/** What a polling backend asks of each delivery: where it stands, and the courier. */
const POLL = `query Poll($uids: [ID!]!) { deliveries(uids: $uids) { uid status courier { name location { lat lng } } estimatedDropoffAt } }`;

const uidOf = (prefix, n) => `${prefix}${String(n).padStart(4, '0')}-4000-8000-${String(n).padStart(12, '0')}`;
const activeUids = Array.from({ length: DELIVERIES }, (_, n) => uidOf('aaaaaaaa-', n));
const deliveredUids = Array.from({ length: DELIVERIES }, (_, n) => uidOf(DELIVERED_PREFIX, n));

const upstreamCount = async (upstream) => (await (await fetch(`${upstream.origin}/__count`)).json()).count;
const resetCount = (upstream) => fetch(`${upstream.origin}/__reset`);

/** Every uid read once per call, in batches of 100 sent together; the deliveries answered. */
async function readAll(origin, uids) {
  const batches = [];
  for (let at = 0; at < uids.length; at += BATCH) batches.push(uids.slice(at, at + BATCH));
  const answers = await Promise.all(
    batches.map(async (batch) => {
      const response = await fetch(`${origin}/graphql`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', authorization: `Bearer ${KEY}` },
        body: JSON.stringify({ query: POLL, variables: { uids: batch } }),
      });
      const body = await response.json();
      if (body.errors) throw new Error(`a poll answered ${JSON.stringify(body.errors).slice(0, 300)}`);
      return body.data.deliveries.filter(Boolean).length;
    }),
  );
  return answers.reduce((sum, n) => sum + n, 0);
}

/** A webhook of each delivery named, one after another (the same courier throughout, as the fixed upstream reads). */
const eventsOf = (uids, eventName, round = 0) =>
  uids.map((uid, n) => ({
    uid,
    event_name: eventName,
    driver_name: 'Casey Courier',
    driver_location: { lat: 37.7749 + round * 1e-4, lng: -122.4194 + n * 1e-6 },
  }));

/** A location webhook per delivery per round, each with a position of its own (so none is a duplicate). */
function pollingEvents(rounds) {
  const events = [];
  for (let round = 1; round <= rounds; round += 1)
    events.push(...eventsOf(activeUids, 'location.dropoff_enroute', round));
  return events;
}

/** (a) on one facade: GETs per 1,000 delivery reads while webhooks come every 5 s and all are read every 10 s. */
async function pollingBackend(facade, upstream, poster, seconds) {
  // Deliveries under way: each has had its webhooks (the last one here), and the backend's first poll read and kept it.
  await poster.call('retarget', { origin: facade.origin });
  await poster.call('burst', { name: 'enroute' });
  await readAll(facade.origin, activeUids);
  await sleep(1000);
  await resetCount(upstream);
  const posting = poster.call('openLoop', { name: 'polling', rate: DELIVERIES / 5 });
  let reads = 0;
  const started = Date.now();
  for (let poll = 0; poll * 10 < seconds; poll += 1) {
    const due = started + poll * 10_000;
    if (due > Date.now()) await sleep(due - Date.now());
    reads += await readAll(facade.origin, activeUids);
  }
  const posted = await posting;
  const gets = await upstreamCount(upstream);
  return { reads, gets, perThousand: (gets / reads) * 1000, webhooks: posted.acknowledged };
}

/** (b) on one facade: 1,000 delivered deliveries read once (the confirming read), then `times` more. */
async function deliveredReads(facade, upstream, poster, times) {
  // Delivered: their last webhook came, then one read confirmed the end.
  await poster.call('burst', { name: 'delivered' });
  await readAll(facade.origin, deliveredUids);
  await sleep(1000);
  await resetCount(upstream);
  let reads = 0;
  for (let round = 0; round < times; round += 1) reads += await readAll(facade.origin, deliveredUids);
  const gets = await upstreamCount(upstream);
  return { reads, gets };
}

/** (d): CPU per request at max throughput of the facade (reads from the view) and of the proxy; p99 at 200 req/s. */
async function viewCost(facade, proxy, upstream, http, seconds) {
  const uid = deliveredUids[0];
  const body = JSON.stringify({ query: FACADE_SINGLE_READ, variables: { uid } });
  const json = { 'content-type': 'application/json', authorization: `Bearer ${KEY}` };
  const read = { url: `${facade.origin}/graphql`, method: 'POST', headers: json, body, graphql: true };
  const proxied = { url: `${proxy.origin}/api/v1/${PLATFORM_ID}/deliveries/${uid}`, headers: json };
  const measure = async (load, pid) => {
    await http.call('autocannon', { ...load, connections: 32, duration: 1 });
    const cpu = cpuMeter([{ name: 'contender', pid }]);
    const result = await http.call('autocannon', { ...load, connections: 32, duration: seconds });
    const used = cpu.stop();
    return { rps: result.rps, cpuUs: (used.msByName.contender * 1000) / (result.rps * (used.wallMs / 1000)) };
  };
  await resetCount(upstream);
  const facadeRun = await measure(read, facade.child.pid);
  const facadeGets = await upstreamCount(upstream);
  const proxyRun = await measure(proxied, proxy.child.pid);
  await http.call('fixedRate', { ...read, rate: 200, duration: 1 });
  const fixed = await http.call('fixedRate', { ...read, rate: 200, duration: seconds });
  return { facade: facadeRun, proxy: proxyRun, facadeGets, fixed };
}

export async function viewReads({ quick, command, flags = {} }) {
  const seconds = quick ? 20 : 60;
  const costSeconds = quick ? 3 : 10;
  const upstream = await startUpstream();
  const proxy = await startReverseProxy(upstream.origin);
  const keys = keyPair();
  const env = { READ_MAX_AGE: '30', BATCH_CONCURRENCY: '64' };
  const facade = await startFacade(upstream.url, { label: 'view-reads', env, publicKeyPem: keys.publicKeyPem });
  const baselineDir = flags.baseline && resolve(flags.baseline);
  const baseline = baselineDir
    ? await startFacade(upstream.url, {
        label: 'view-reads-baseline',
        entry: join(baselineDir, 'dist/main.js'),
        cwd: baselineDir,
        publicKeyPem: keys.publicKeyPem,
      })
    : undefined;
  const http = forkWorker('http-load');
  const poster = forkWorker('webhook-poster');
  await poster.call('init', { origin: facade.origin, privateKeyPem: keys.privateKeyPem });
  await poster.call('prepare', { name: 'enroute', events: eventsOf(activeUids, 'delivery.dropoff_enroute') });
  await poster.call('prepare', { name: 'polling', events: pollingEvents(seconds / 5) });
  await poster.call('prepare', { name: 'delivered', events: eventsOf(deliveredUids, 'delivery.dropoff_complete') });

  const contenders = [
    ['delivery-graph', facade],
    ...(baseline ? [[`delivery-graph at ${basename(baselineDir)}`, baseline]] : []),
  ];
  const rows = [];
  const results = {};
  for (const [name, contender] of contenders) {
    const polling = await pollingBackend(contender, upstream, poster, seconds);
    const delivered = await deliveredReads(contender, upstream, poster, quick ? 3 : 10);
    results[name] = { polling, delivered };
    rows.push([
      name,
      `${fmt(polling.perThousand, 1)} (${thousands(polling.gets)} GETs / ${thousands(polling.reads)} reads, ${thousands(polling.webhooks)} webhooks)`,
      `${thousands(delivered.gets)} GETs / ${thousands(delivered.reads)} reads`,
    ]);
  }
  const cost = await viewCost(facade, proxy, upstream, http, costSeconds);
  await Promise.all([http.stop(), poster.stop()]);
  await Promise.all([upstream.stop(), proxy.stop(), facade.stop(), baseline?.stop()]);

  const ours = results['delivery-graph'];
  const ratio = cost.facade.cpuUs / cost.proxy.cpuUs;
  const goals = [
    {
      id: 'view-polling',
      measured: `**${fmt(ours.polling.perThousand, 1)}** GETs per 1,000 reads (${thousands(ours.polling.gets)} / ${thousands(ours.polling.reads)})`,
      met: ours.polling.perThousand <= 50,
    },
    {
      id: 'view-delivered',
      measured: `**${thousands(ours.delivered.gets)}** GETs for ${thousands(ours.delivered.reads)} reads`,
      met: ours.delivered.gets === 0,
    },
    {
      id: 'view-cpu',
      measured: `**${fmt(ratio, 2)}×** (${fmt(cost.facade.cpuUs, 0)} vs ${fmt(cost.proxy.cpuUs, 0)} µs per request; ${thousands(cost.facadeGets)} upstream GETs during the facade's run)`,
      met: ratio <= 0.8,
    },
    {
      id: 'view-p99',
      measured: `**${fmt(cost.fixed.p99, 2)} ms** (p50 ${fmt(cost.fixed.p50, 2)} ms, ${cost.fixed.errors} errors)`,
      met: cost.fixed.p99 <= 2,
    },
  ];
  const body = [
    `${DELIVERIES} active deliveries on a fixed upstream (it counts what it serves), READ_MAX_AGE=30: (a) a location webhook every 5 s for each (${DELIVERIES / 5}/s, signed ahead, open loop, from a process of their own) while all are read every 10 s for ${seconds} s in ${DELIVERIES / BATCH} concurrent \`deliveries\` batches of ${BATCH}, after each delivery's dropoff_enroute webhook and one first poll that reads and keeps each; (b) ${DELIVERIES} deliveries the upstream reads as delivered, their dropoff_complete webhooks posted, read once, then again ${quick ? 3 : 10} times. Each contender in turn, on the same upstream. (d) \`delivery(uid)\` of one delivered delivery, the single-read selection (about 25 fields), at 32 connections for ${costSeconds} s (CPU of the contender's process, all threads, per request), against the undici reverse proxy's GET of it; then ${costSeconds} s at 200 req/s.`,
    '',
    table(['contender', '(a) upstream GETs per 1,000 reads', '(b) delivered, after the confirming read'], rows),
    '',
    `- (d) CPU per request: reads from the view **${fmt(cost.facade.cpuUs, 0)} µs** (${thousands(cost.facade.rps)} req/s), reverse proxy ${fmt(cost.proxy.cpuUs, 0)} µs (${thousands(cost.proxy.rps)} req/s): **${fmt(ratio, 2)}×** (goal ≤ 0.8×)`,
    `- reads from the view at 200 req/s: p50 ${fmt(cost.fixed.p50, 2)} ms, p99 **${fmt(cost.fixed.p99, 2)} ms** (goal ≤ 2 ms)`,
    '- (c) the single read of a fresh uid: the single-read scenario with `--baseline`.',
  ].join('\n');
  writeSection('view-reads', 'Reads from the stored view (issue 40)', body, { command, quick, goals });
  return results;
}

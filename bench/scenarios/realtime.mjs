// Realtime: signed webhooks → verified, stored, published → graphql-ws
// subscribers. Ack latency, webhook → subscriber latency, losses, maximum
// ingest; then fan-out to 10,000 subscribers and the memory each costs.
// Every load generator runs in a process of its own (bench/load/): the
// subscriber fleet, the open-loop poster, and the max-ingest poster. The
// subscriber process times each message against the poster's send time on the
// clock both share (bench/lib/clock.mjs); how closely they agree is measured
// before each run and printed with it.
import { spawnSync } from 'node:child_process';
import os from 'node:os';
import { clockAgreement, describeAgreement } from '../lib/clock.mjs';
import { startFacade, startRedis, startReplica, startUpstream } from '../lib/contenders.mjs';
import { cpuMeter, describeCpu } from '../lib/cpu.mjs';
import { sleep } from '../lib/proc.mjs';
import { fmt, table, thousands, writeSection } from '../lib/report.mjs';
import { median, spread } from '../lib/stats.mjs';
import { keyPair } from '../lib/webhooks.mjs';
import { forkWorker } from '../lib/worker.mjs';
import { KEY } from './single-read.mjs';

const uidOf = (i) => `00000000-0000-4000-9000-${String(i).padStart(12, '0')}`;

/** 1,000 subscribers: 100 deliveries × 10, webhooks at 500/s. */
const DELIVERIES = 100;
const PER_DELIVERY = 10;
const RATE = 500;
const INGEST_IN_FLIGHT = 64;
/** Seconds at the rate before the measured run, not counted. */
const WARM_SECONDS = 1;

/**
 * The max-ingest poster, in its own process. It signs every round's events now,
 * while the realtime run is being set up; the run waits for `ready`, so no
 * signing overlaps a measurement. Every event is distinct (none is a duplicate
 * the facade could skip), on deliveries nobody subscribes to.
 */
function prepareIngest({ quick, origin, privateKeyPem }) {
  const rounds = quick ? 1 : 3;
  const perRound = quick ? 3_000 : 20_000;
  const worker = forkWorker('webhook-poster');
  const ready = (async () => {
    await worker.call('init', { origin, privateKeyPem });
    for (let round = 0; round < rounds; round += 1) {
      const events = Array.from({ length: perRound }, (_, k) => {
        const n = round * perRound + k;
        return { uid: uidOf(1000 + (n % 500)), event_name: 'location.dropoff_enroute', driver_location: { lat: 37 + n / 1e6, lng: -122 - n / 1e6 } };
      });
      await worker.call('prepare', { name: `round-${round}`, events });
    }
  })();
  // Until the run awaits it, a failure here must not be an unhandled rejection.
  ready.catch(() => undefined);
  return { worker, ready, rounds, perRound };
}

/** Maximum verified-and-stored events/s: the prepared rounds, each with 64 posts in flight. `servers`: [{ name, pid }] to count CPU for. */
async function measureIngest(ingest, servers) {
  await ingest.ready;
  const results = [];
  const cpu = cpuMeter([...servers, { name: 'ingest poster', pid: ingest.worker.pid }]);
  for (let round = 0; round < ingest.rounds; round += 1) results.push(await ingest.worker.call('closedLoop', { name: `round-${round}`, concurrency: INGEST_IN_FLIGHT }));
  const cpuUsed = cpu.stop();
  await ingest.worker.call('close');
  await ingest.worker.stop();
  const rates = results.map((r) => r.rate);
  return { rates, rate: median(rates), ...spread(rates), failed: results.reduce((sum, r) => sum + r.failed, 0), rounds: ingest.rounds, perRound: ingest.perRound, cpu: cpuUsed };
}

/**
 * 1,000 subscribers on `subscribeOrigin` (one process), webhooks at 500/s open
 * loop to `postOrigin` (another process). `before` is awaited just before the
 * measured run (the ingest poster's signing); `servers` ([{ name, pid }]) are
 * the processes under test, whose CPU is counted with the load processes'.
 */
async function measureDelivery({ quick, postOrigin, subscribeOrigin, privateKeyPem, before, servers, p99Goal }) {
  const subscribers = forkWorker('subscribers');
  const poster = forkWorker('webhook-poster');
  const seconds = quick ? 3 : 20;
  const total = RATE * seconds;
  const uids = Array.from({ length: DELIVERIES }, (_, d) => uidOf(d));
  const fleet = DELIVERIES * PER_DELIVERY;
  await Promise.all([
    subscribers.call('connect', { origin: subscribeOrigin, key: KEY, count: fleet, uids }),
    (async () => {
      await poster.call('init', { origin: postOrigin, privateKeyPem });
      await poster.call('prepare', { name: 'warm-up', events: uids.map((uid) => ({ uid, event_name: 'delivery.created', status: 'warm-up' })) });
      // Event n's status is its tag e<n>: the subscriber process looks up its send time by n.
      const stream = (tag, count) => Array.from({ length: count }, (_, n) => ({ uid: uids[n % DELIVERIES], event_name: 'delivery.dropoff_enroute', status: `${tag}${n}` }));
      await poster.call('prepare', { name: 'warm-run', events: stream('w', WARM_SECONDS * RATE) });
      await poster.call('prepare', { name: 'run', events: stream('e', total) });
    })(),
  ]);
  // Every subscription is live once every subscriber has its delivery's warm-up event.
  await poster.call('burst', { name: 'warm-up' });
  const warm = await subscribers.call('waitForTag', { tag: 'warm-up', count: fleet, timeoutMs: 60_000 });
  if (warm.timedOut) throw new Error(`only ${warm.count} of ${fleet} subscribers got the warm-up event`);
  // A second at the rate, not counted: the facade's and the load processes' code paths are compiled before the run.
  const warmBefore = await subscribers.call('received');
  const warmRun = await poster.call('openLoop', { name: 'warm-run', rate: RATE });
  await subscribers.call('waitFor', { count: warmBefore + warmRun.acknowledged * PER_DELIVERY, timeoutMs: 30_000 });
  await before;
  const clocks = await clockAgreement(poster, subscribers);
  const receivedBefore = await subscribers.call('received');

  const cpu = cpuMeter([...servers, { name: 'subscribers', pid: subscribers.pid }, { name: 'poster', pid: poster.pid }]);
  const run = await poster.call('openLoop', { name: 'run', rate: RATE });
  const arrived = await subscribers.call('waitFor', { count: receivedBefore + run.acknowledged * PER_DELIVERY, timeoutMs: 30_000 });
  const cpuUsed = cpu.stop();
  // A moment more, so that a duplicate or a stray message after the last expected one is counted too.
  await sleep(200);
  const delivery = await subscribers.call('latencies', { prefix: 'e', sentAt: run.sentAt, acked: run.acked, slowMs: p99Goal });
  await subscribers.call('close');
  await poster.call('close');
  await Promise.all([subscribers.stop(), poster.stop()]);
  return { run, delivery, clocks, total, seconds, fleet, timedOut: arrived.timedOut, cpu: cpuUsed };
}

function realtimeRows(m, ingest, { p99Goal, ingestGoal }) {
  const { run, delivery: d } = m;
  return [
    ['webhook ack p50 / p99 (in the poster process)', `${fmt(run.ackP50, 2)} / ${fmt(run.ackP99, 2)} ms`, ''],
    ['webhook → subscriber p50 / p99 / p99.9 / max', `${fmt(d.p50, 2)} / **${fmt(d.p99, 2)}** / ${fmt(d.p999, 2)} / ${fmt(d.max, 2)} ms`, `p99 ≤ ${p99Goal} ms`],
    [`events whose slowest subscriber waited over ${p99Goal} ms (runs of consecutive events; longest)`, `${d.slowEvents} (${d.slowRuns}; ${d.longestRun} = ${fmt((d.longestRun * 1000) / RATE, 0)} ms of sending)`, ''],
    ['events acknowledged', String(run.acknowledged), String(m.total)],
    ['messages delivered (of those expected)', `${d.delivered} (of ${d.expected})`, ''],
    ['messages lost', String(d.lost), '0'],
    ['messages duplicated or to the wrong subscriber', String(d.duplicates + d.misrouted), '0'],
    ['webhooks refused or failed', String(run.failed), '0'],
    ['poster behind its schedule, p99 / max', `${fmt(run.lateP99, 2)} / ${fmt(run.lateMax, 2)} ms`, ''],
    ['poster ↔ subscriber clocks (difference ± bound)', describeAgreement(m.clocks), ''],
    ['CPU during the run, % of one core', describeCpu(m.cpu, os.cpus().length), ''],
    [
      `max verified-and-stored events/s (median of ${ingest.rounds})`,
      `**${thousands(ingest.rate)}**${ingest.rounds > 1 ? ` (rounds ${thousands(ingest.min)}–${thousands(ingest.max)})` : ''}${ingest.failed ? `, ${ingest.failed} refused or failed` : ''}`,
      `≥ ${thousands(ingestGoal)}`,
    ],
    ['CPU during ingest, % of one core', describeCpu(ingest.cpu, os.cpus().length), ''],
  ];
}

function realtimeGoals(m, ingest, { realtimeId, ingestId, p99Goal, ingestGoal }) {
  const d = m.delivery;
  const clean = d.lost === 0 && m.run.failed === 0 && d.duplicates === 0 && d.misrouted === 0;
  return [
    {
      id: realtimeId,
      measured: `**p99 ${fmt(d.p99, 2)} ms, ${d.lost} lost** (p50 ${fmt(d.p50, 2)} ms; ${d.delivered} messages; ${m.run.failed} webhooks failed; other load ${fmt(m.cpu.others, 0)} % of a core)`,
      met: d.p99 <= p99Goal && clean,
    },
    {
      id: ingestId,
      measured: `**${thousands(ingest.rate)}/s** (${ingest.rounds > 1 ? `rounds ${thousands(ingest.min)}–${thousands(ingest.max)}; ` : ''}other load ${fmt(ingest.cpu.others, 0)} % of a core)`,
      met: ingest.rate >= ingestGoal && ingest.failed === 0,
    },
  ];
}

const method = (m, ingest) =>
  `${m.fleet} graphql-ws subscribers (${DELIVERIES} deliveries × ${PER_DELIVERY}, one \`deliveryEvents(uids:)\` subscription per connection) in one process; ${m.total} signed webhooks (signed ahead) posted at ${RATE}/s, open loop, from another, after ${WARM_SECONDS} s at the rate not counted; latency from the poster's send (the start of its POST) to the subscriber's message, both read on the machine's monotonic clock (CLOCK_MONOTONIC, which every process shares), the two processes' readings checked against each other over IPC just before the run (the row below). Ingest: ${ingest.rounds} round(s) of ${ingest.perRound} distinct signed events, ${INGEST_IN_FLIGHT} in flight, from a third process, to deliveries nobody subscribes to, after the realtime run; the median round.`;

export async function realtime({ quick, command }) {
  const { publicKeyPem, privateKeyPem } = keyPair();
  const upstream = await startUpstream();
  const facade = await startFacade(upstream.url, { publicKeyPem, label: 'realtime' });
  const ingest = prepareIngest({ quick, origin: facade.origin, privateKeyPem });
  const targets = { realtimeId: 'realtime', ingestId: 'ingest', p99Goal: 10, ingestGoal: 5_000 };
  const servers = [{ name: 'facade', pid: facade.child.pid }];
  const m = await measureDelivery({ quick, postOrigin: facade.origin, subscribeOrigin: facade.origin, privateKeyPem, before: ingest.ready, servers, p99Goal: targets.p99Goal });
  const i = await measureIngest(ingest, servers);
  const body = [`One instance on the embedded SQLite store. ${method(m, i)}`, '', table(['metric', 'value', 'goal'], realtimeRows(m, i, targets))].join('\n');
  writeSection('realtime', 'Realtime: webhooks to subscribers', body, { command, quick, goals: realtimeGoals(m, i, targets) });
  await Promise.all([upstream.stop(), facade.stop()]);
}

/** The same measurement across two instances sharing Redis: webhooks to A, subscribers on B; then ingest on A alone. */
export async function realtimeRedis({ quick, command }) {
  const redis = await startRedis();
  const { publicKeyPem, privateKeyPem } = keyPair();
  const upstream = await startUpstream();
  // Both instances must accept each other's client tokens, so Redis needs a shared secret.
  const env = { REDIS_URL: redis.url, CLIENT_TOKEN_SECRET: 'bench-client-token-secret-shared-by-instances' };
  const a = await startFacade(upstream.url, { publicKeyPem, env, label: 'realtime-redis-A' });
  const b = await startFacade(upstream.url, { publicKeyPem, env, label: 'realtime-redis-B' });
  const ingest = prepareIngest({ quick, origin: a.origin, privateKeyPem });
  const redisServer = { name: 'redis-server', pid: redis.child.pid };
  const instanceA = { name: 'A', pid: a.child.pid };
  const targets = { realtimeId: 'realtime-redis', ingestId: 'ingest-redis', p99Goal: 25, ingestGoal: 2_000 };
  const servers = [instanceA, { name: 'B', pid: b.child.pid }, redisServer];
  const m = await measureDelivery({ quick, postOrigin: a.origin, subscribeOrigin: b.origin, privateKeyPem, before: ingest.ready, servers, p99Goal: targets.p99Goal });
  // Ingest is on one instance: B goes first.
  await b.stop();
  const i = await measureIngest(ingest, [instanceA, redisServer]);
  const body = [
    `Two instances sharing one Redis (${redis.version}, \`appendonly yes\`, \`appendfsync always\`, on this machine): webhooks posted to instance A, the subscribers connected to instance B. ${method(m, i)} Ingest runs on A alone, B stopped by then.`,
    '',
    table(['metric', 'value', 'goal'], realtimeRows(m, i, targets)),
  ].join('\n');
  writeSection('realtime-redis', 'Realtime across instances on Redis', body, { command, quick, goals: realtimeGoals(m, i, targets) });
  await Promise.all([upstream.stop(), a.stop()]);
  await redis.stop();
}

/**
 * What waiting for a replica costs (issue 23): a primary and one replica, two
 * instances (webhooks to A, subscribers on B), measured once with
 * REDIS_MIN_REPLICAS_ACK=0 and once with the default (1, since the primary has
 * a replica: every stored batch waits for WAIT), in that order, in one run.
 */
export async function redisReplicaAck({ quick, command }) {
  const primary = await startRedis();
  const replica = await startReplica(primary);
  const { publicKeyPem, privateKeyPem } = keyPair();
  const upstream = await startUpstream();
  const results = [];
  for (const [label, acks] of [['no replica acknowledgement (REDIS_MIN_REPLICAS_ACK=0)', '0'], ['one replica acknowledging (the default with a replica)', undefined]]) {
    // The same events again would be duplicates, which are stored once and published once: each setting starts empty.
    spawnSync('redis-cli', ['-p', String(primary.port), 'flushall'], { stdio: 'ignore' });
    const env = { REDIS_URL: primary.url, CLIENT_TOKEN_SECRET: 'bench-client-token-secret-shared-by-instances', ...(acks === undefined ? {} : { REDIS_MIN_REPLICAS_ACK: acks }) };
    const a = await startFacade(upstream.url, { publicKeyPem, env, label: `replica-ack-${acks ?? 'default'}-A` });
    const b = await startFacade(upstream.url, { publicKeyPem, env, label: `replica-ack-${acks ?? 'default'}-B` });
    const ingest = prepareIngest({ quick, origin: a.origin, privateKeyPem });
    const servers = [{ name: 'A', pid: a.child.pid }, { name: 'B', pid: b.child.pid }, { name: 'primary', pid: primary.child.pid }, { name: 'replica', pid: replica.child.pid }];
    const m = await measureDelivery({ quick, postOrigin: a.origin, subscribeOrigin: b.origin, privateKeyPem, before: ingest.ready, servers, p99Goal: 25 });
    await b.stop();
    const i = await measureIngest(ingest, servers.filter((server) => server.name !== 'B'));
    await a.stop();
    results.push({ label, m, i });
  }
  const row = ({ label, m, i }) => [
    label,
    `${fmt(m.run.ackP50, 2)} / ${fmt(m.run.ackP99, 2)} ms`,
    `${fmt(m.delivery.p50, 2)} / ${fmt(m.delivery.p99, 2)} ms`,
    `${m.delivery.lost} / ${m.run.failed}`,
    `${thousands(i.rate)}${i.rounds > 1 ? ` (${thousands(i.min)}–${thousands(i.max)})` : ''}${i.failed ? `, ${i.failed} failed` : ''}`,
  ];
  const body = [
    `A Redis primary and one replica (${primary.version}, both \`appendonly yes\`, \`appendfsync always\`, on this machine), two instances: webhooks to A, subscribers on B, then ingest on A alone. Measured first without waiting for the replica, then with the default (every stored batch waits until the replica confirms it, Redis \`WAIT 1\`), in one run. ${method(results[0].m, results[0].i)}`,
    '',
    table(['setting', 'webhook ack p50 / p99', 'webhook → subscriber p50 / p99', 'lost / webhooks failed', 'max stored events/s (median; rounds)'], results.map(row)),
    '',
    `With the replica acknowledging: ingest ${fmt(results[1].i.rate / results[0].i.rate, 2)}× that without, subscriber p99 ${fmt(Math.abs(results[1].m.delivery.p99 - results[0].m.delivery.p99), 2)} ms ${results[1].m.delivery.p99 >= results[0].m.delivery.p99 ? 'higher' : 'lower'} (one run of each, the second right after the first: differences of this size are within this machine's run-to-run noise).`,
  ].join('\n');
  writeSection('redis-replica-ack', 'Redis with a replica acknowledging', body, { command, quick });
  await upstream.stop();
  await replica.stop();
  await primary.stop();
}

export async function fanOut({ quick, command }) {
  const { publicKeyPem, privateKeyPem } = keyPair();
  const upstream = await startUpstream();
  const facade = await startFacade(upstream.url, { publicKeyPem, label: 'fan-out' });
  const subscribers = forkWorker('subscribers');
  const poster = forkWorker('webhook-poster');
  const perDelivery = 10;
  const deliveries = quick ? 100 : 1000;
  const fleet = deliveries * perDelivery;
  const uids = Array.from({ length: deliveries }, (_, d) => uidOf(d));
  const SINGLES = 20;

  await poster.call('init', { origin: facade.origin, privateKeyPem });
  await Promise.all([
    poster.call('prepare', { name: 'warm-up', events: uids.map((uid) => ({ uid, event_name: 'delivery.created', status: 'warm-up' })) }),
    poster.call('prepare', { name: 'singles', events: Array.from({ length: SINGLES }, (_, k) => ({ uid: uids[k % deliveries], event_name: 'delivery.dropoff_enroute', status: `single-${k}` })) }),
    poster.call('prepare', { name: 'burst', events: uids.map((uid) => ({ uid, event_name: 'delivery.dropoff_arrived', status: 'burst' })) }),
  ]);
  await sleep(500);
  const idleRss = facade.rssKb();
  await subscribers.call('connect', { origin: facade.origin, key: KEY, count: fleet, uids });
  await poster.call('burst', { name: 'warm-up' });
  const warm = await subscribers.call('waitForTag', { tag: 'warm-up', count: fleet, timeoutMs: 60_000 });
  if (warm.timedOut) throw new Error(`only ${warm.count} of ${fleet} subscribers got the warm-up event`);
  await sleep(1000);
  const loadedRss = facade.rssKb();
  const clocks = await clockAgreement(poster, subscribers);

  // One event: from its send until the last of its delivery's subscribers has it.
  const singles = [];
  for (let k = 0; k < SINGLES; k += 1) {
    const { sentAt } = await poster.call('postOne', { name: 'singles', index: k });
    const got = await subscribers.call('waitForTag', { tag: `single-${k}`, count: perDelivery, timeoutMs: 10_000 });
    if (got.timedOut) throw new Error(`event single-${k} reached ${got.count} of ${perDelivery} subscribers`);
    singles.push(got.last - sentAt);
  }

  // A burst: one event to every delivery at once; until every subscriber has its own.
  const burst = await poster.call('burst', { name: 'burst' });
  const got = await subscribers.call('waitForTag', { tag: 'burst', count: fleet, timeoutMs: 60_000 });
  if (got.timedOut) throw new Error(`the burst reached ${got.count} of ${fleet} subscribers`);
  const burstMs = got.last - burst.startedAt;

  const perSubscriberKb = (loadedRss - idleRss) / fleet;
  const body = [
    `${fleet} concurrent graphql-ws connections, one \`deliveryEvents(uids:)\` subscription each, ${perDelivery} per delivery, in a process of their own; the webhooks from another (times across the two on the shared monotonic clock, which agreed within ${describeAgreement(clocks)}). Memory is the facade's resident set (VmRSS) after the subscribers connected and one event reached each, minus its idle resident set.`,
    '',
    table(
      ['metric', 'value', 'goal'],
      [
        ['resident memory idle → with subscribers', `${fmt(idleRss / 1024, 0)} → ${fmt(loadedRss / 1024, 0)} MiB`, ''],
        ['resident memory per subscriber', `${fmt(perSubscriberKb, 1)} KB`, '≤ 30 KB'],
        [`one event → all ${perDelivery} subscribers of its delivery (median of ${SINGLES})`, `${fmt(median(singles), 2)} ms`, ''],
        [`burst: one event per delivery → all ${fleet} subscribers`, `${fmt(burstMs, 0)} ms`, ''],
      ],
    ),
  ].join('\n');
  writeSection('fan-out', 'Fan-out and memory', body, { command, quick });
  await subscribers.call('close');
  await poster.call('close');
  await Promise.all([subscribers.stop(), poster.stop()]);
  await Promise.all([upstream.stop(), facade.stop()]);
}

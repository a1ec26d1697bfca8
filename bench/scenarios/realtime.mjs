// Realtime: signed webhooks → verified, stored, published → graphql-ws
// subscribers. Ack latency, webhook → subscriber latency, losses, the facade's
// CPU per delivered message and its event-loop delay, maximum ingest; then
// fan-out to 10,000 subscribers and the memory each costs.
// Every load generator runs in a process of its own (bench/load/): the
// subscriber fleet (one process per 5,000 subscribers, bench/lib/fleet.mjs),
// the open-loop poster, and the max-ingest poster. The subscriber processes
// time each message against the poster's send time on the clock they share
// (bench/lib/clock.mjs); how closely they agree is measured before each run and
// printed with it.
//
// Options (npm run bench -- realtime --subscribers=10000 --per-delivery=100 --rate=100):
//   --baseline=<checkout>  that checkout's build too (its dist/main.js), side by side: the
//                          rounds alternate between the two, each facade warmed before each
//   --rounds=N             realtime runs per facade (default 3 with a baseline, else 1; 1 in --quick)
//   --subscribers=N --per-delivery=K --rate=R   the fleet and the webhook rate (1,000, 10, 500)
//   --seconds=S            the measured run (20; 3 in --quick), after 2 s at the rate not counted
//   --subscriber-processes=N   processes holding the fleet (one per 5,000 subscribers)
//   realtime-redis only: --subscribers-on=B|both   the fleet on instance B, or half on each
// `realtime-scale` and `realtime-redis-scale` are the 10,000 (one instance) and 20,000
// (two instances on Redis, half on each) variants: 100 per delivery at 100 events/s;
// `realtime-one` is the common case: 1,000 deliveries, one subscriber each, 1,000 events/s.
// --perf: where each facade's CPU goes, by thread and part of the path (bench/lib/perf.mjs).
import { spawnSync } from 'node:child_process';
import { mkdtempSync } from 'node:fs';
import os from 'node:os';
import { basename, join, resolve } from 'node:path';
import { describeAgreement } from '../lib/clock.mjs';
import { startFacade, startRedis, startReplica, startUpstream } from '../lib/contenders.mjs';
import { cpuMeter, describeCpu, threadMeter } from '../lib/cpu.mjs';
import { microsecondsByPart, OTHER, PARTS, perfAvailable, splitPerf, startPerf } from '../lib/perf.mjs';
import { startFleet } from '../lib/fleet.mjs';
import { describeLoopDelay, describeLoopDelays, loopDelayWindow, worstLoopDelay } from '../lib/loop-delay.mjs';
import { sleep } from '../lib/proc.mjs';
import { fmt, table, thousands, writeSection } from '../lib/report.mjs';
import { median, spread } from '../lib/stats.mjs';
import { keyPair } from '../lib/webhooks.mjs';
import { forkWorker } from '../lib/worker.mjs';
import { KEY } from './single-read.mjs';

const uidOf = (i) => `00000000-0000-4000-9000-${String(i).padStart(12, '0')}`;

const INGEST_IN_FLIGHT = 64;
/**
 * Seconds at the rate before each measured run, not counted: the facade's and the load's code paths compiled (a cold
 * JIT otherwise reads as the build's cost).
 */
const WARM_SECONDS = 2;
/** The event-loop delay every scenario is held to (issue 32). */
const LOOP_GOAL_MS = 10;

const positiveInteger = (flags, name, fallback) => {
  const value = Number(flags[name] ?? fallback);
  if (!Number.isInteger(value) || value <= 0)
    throw new Error(`--${name}: expected a positive whole number, got "${flags[name]}"`);
  return value;
};

/** The run's shape from the command line (see the header). */
function runOptions(flags, quick, defaults = {}) {
  const merged = { ...defaults, ...flags };
  const subscribers = positiveInteger(merged, 'subscribers', 1000);
  const perDelivery = positiveInteger(merged, 'per-delivery', 10);
  if (subscribers % perDelivery !== 0)
    throw new Error(`--subscribers (${subscribers}) must be a multiple of --per-delivery (${perDelivery})`);
  const baselineDir = merged.baseline && resolve(merged.baseline);
  return {
    subscribers,
    perDelivery,
    deliveries: subscribers / perDelivery,
    rate: positiveInteger(merged, 'rate', 500),
    seconds: Number(merged.seconds ?? (quick ? 3 : 20)),
    rounds: positiveInteger(merged, 'rounds', quick ? 1 : baselineDir ? 3 : 1),
    processes:
      merged['subscriber-processes'] === undefined ? undefined : positiveInteger(merged, 'subscriber-processes', 1),
    subscribersOn: merged['subscribers-on'] ?? 'B',
    /** --perf: each facade sampled by Linux perf during each measured run (bench/lib/perf.mjs). */
    perf: merged.perf !== undefined,
    baselineDir,
    /** The recorded goals' shape: 1,000 subscribers, 10 per delivery, 500/s. */
    standard: subscribers === 1000 && perDelivery === 10 && positiveInteger(merged, 'rate', 500) === 500,
    /** The common case: 1,000 deliveries, one subscriber each (a tracking page), 1,000/s. */
    one: subscribers === 1000 && perDelivery === 1 && positiveInteger(merged, 'rate', 500) === 1000,
    scale:
      subscribers === (defaults.scaleSubscribers ?? 10_000) &&
      perDelivery === 100 &&
      positiveInteger(merged, 'rate', 500) === 100,
  };
}

/** This checkout's build, and the baseline's when asked for: what startFacade needs to run each. */
function builds(options) {
  // With --perf, JIT frames get their names in perf's samples.
  const execArgv = options.perf ? ['--perf-basic-prof'] : [];
  const own = [{ name: 'this checkout', start: { execArgv } }];
  if (!options.baselineDir) return own;
  return [
    ...own,
    {
      name: basename(options.baselineDir),
      start: { entry: join(options.baselineDir, 'dist/main.js'), cwd: options.baselineDir, execArgv },
    },
  ];
}

/**
 * The max-ingest poster, in its own process. It signs every round's events now,
 * while the realtime runs are being set up; the ingest waits for `ready`. Every
 * event is distinct (none is a duplicate the facade could skip), on deliveries
 * nobody subscribes to. The same set goes to each build (each has its own store).
 */
function prepareIngest({ quick, privateKeyPem }) {
  const rounds = quick ? 1 : 3;
  const perRound = quick ? 3_000 : 20_000;
  const worker = forkWorker('webhook-poster');
  const ready = (async () => {
    await worker.call('init', { origin: 'http://127.0.0.1:9', privateKeyPem });
    for (let round = 0; round < rounds; round += 1) {
      const events = Array.from({ length: perRound }, (_, k) => {
        const n = round * perRound + k;
        return {
          uid: uidOf(100_000 + (n % 500)),
          event_name: 'location.dropoff_enroute',
          driver_location: { lat: 37 + n / 1e6, lng: -122 - n / 1e6 },
        };
      });
      await worker.call('prepare', { name: `round-${round}`, events });
    }
  })();
  // Until the run awaits it, a failure here must not be an unhandled rejection.
  ready.catch(() => undefined);
  return { worker, ready, rounds, perRound };
}

/**
 * Maximum verified-and-stored events/s of each build: the prepared rounds, each
 * with 64 posts in flight, the builds alternating within each round.
 * `contenders`: [{ name, postOrigin, servers: [{ name, pid }] }].
 */
async function measureIngest(ingest, contenders) {
  await ingest.ready;
  const results = Object.fromEntries(contenders.map((c) => [c.name, []]));
  const cpus = Object.fromEntries(contenders.map((c) => [c.name, []]));
  for (let round = 0; round < ingest.rounds; round += 1) {
    for (const c of contenders) {
      await ingest.worker.call('retarget', { origin: c.postOrigin });
      const cpu = cpuMeter([...c.servers, { name: 'ingest poster', pid: ingest.worker.pid }]);
      results[c.name].push(
        await ingest.worker.call('closedLoop', { name: `round-${round}`, concurrency: INGEST_IN_FLIGHT }),
      );
      cpus[c.name].push(cpu.stop());
    }
  }
  await ingest.worker.call('close');
  await ingest.worker.stop();
  return Object.fromEntries(
    contenders.map(({ name }) => {
      const rates = results[name].map((r) => r.rate);
      return [
        name,
        {
          rates,
          rate: median(rates),
          ...spread(rates),
          failed: results[name].reduce((sum, r) => sum + r.failed, 0),
          rounds: ingest.rounds,
          perRound: ingest.perRound,
          cpu: cpus[name].at(-1),
        },
      ];
    }),
  );
}

/**
 * The signed sets for every round, prepared once in one poster process: each
 * round's events are new to every facade (an event posted twice would be a
 * duplicate, stored once and never published again). Event n of round r has the
 * status `r<r>e<n>`, by which the subscriber processes find its send time.
 */
async function preparePoster({ options, privateKeyPem }) {
  const poster = forkWorker('webhook-poster');
  await poster.call('init', { origin: 'http://127.0.0.1:9', privateKeyPem });
  const uids = Array.from({ length: options.deliveries }, (_, d) => uidOf(d));
  const stream = (tag, count) =>
    Array.from({ length: count }, (_, n) => ({
      uid: uids[n % uids.length],
      event_name: 'delivery.dropoff_enroute',
      status: `${tag}${n}`,
    }));
  for (let round = 0; round < options.rounds; round += 1) {
    await poster.call('prepare', {
      name: `warm-up-${round}`,
      events: uids.map((uid) => ({ uid, event_name: 'delivery.created', status: `warm-up-${round}` })),
    });
    await poster.call('prepare', {
      name: `warm-run-${round}`,
      events: stream(`r${round}w`, WARM_SECONDS * options.rate),
    });
    await poster.call('prepare', {
      name: `run-${round}`,
      events: stream(`r${round}e`, Math.round(options.seconds * options.rate)),
    });
  }
  return { poster, uids };
}

/**
 * One measured run on one build: the fleet connected to its subscribe origins,
 * warmed (every subscriber has its delivery's warm-up event, then WARM_SECONDS at
 * the rate), then the open-loop run. CPU is counted for the build's servers, the
 * fleet and the poster; the event-loop delay of each of its facades is read from
 * their /metrics over the same window.
 */
async function measureDelivery({ options, contender, poster, uids, round, p99Goal }) {
  await poster.call('retarget', { origin: contender.postOrigin });
  const fleet = await startFleet({
    origins: contender.subscribeOrigins,
    key: KEY,
    subscribers: options.subscribers,
    uids,
    processes: options.processes,
  });
  try {
    await poster.call('burst', { name: `warm-up-${round}` });
    const warm = await fleet.waitForTag({ tag: `warm-up-${round}`, count: 'all', timeoutMs: 120_000 });
    if (warm.timedOut)
      throw new Error(
        `${contender.name}: only ${warm.count} of ${options.subscribers} subscribers got the warm-up event`,
      );
    const warmBefore = await fleet.received();
    const warmRun = await poster.call('openLoop', { name: `warm-run-${round}`, rate: options.rate });
    await fleet.waitForEvents({ acked: warmRun.acked, before: warmBefore, timeoutMs: 60_000 });
    const clocks = await fleet.clocks(poster);
    const before = await fleet.received();

    const loop = await loopDelayWindow(contender.facades);
    const cpu = cpuMeter([...contender.servers, ...fleet.processes, { name: 'poster', pid: poster.pid }]);
    const threads = contender.facades.map(({ pid }) => threadMeter(pid));
    const perfDir = options.perf ? mkdtempSync(join(os.tmpdir(), 'dg-perf-')) : undefined;
    const perfs = perfDir
      ? contender.facades.map(({ pid, name }) => ({ pid, file: join(perfDir, `${name}.data`) }))
      : [];
    const samplers = perfs.map(({ pid, file }) => startPerf(pid, file));
    const run = await poster.call('openLoop', { name: `run-${round}`, rate: options.rate });
    const arrived = await fleet.waitForEvents({ acked: run.acked, before, timeoutMs: 60_000 });
    const cpuUsed = cpu.stop();
    const byThread = threads.map((meter) => meter.stop());
    await Promise.all(samplers.map((sampler) => sampler.stop()));
    const loopDelay = await loop.stop();
    // A moment more, so that a duplicate or a stray message after the last expected one is counted too.
    await sleep(200);
    const delivery = await fleet.latencies({
      prefix: `r${round}e`,
      sentAt: run.sentAt,
      acked: run.acked,
      slowMs: p99Goal,
    });
    // The facades' CPU (all their threads: the SQLite writer, libuv's pool, V8's helpers) per message delivered.
    const facadeMs = contender.facades.reduce((sum, { name }) => sum + cpuUsed.msByName[name], 0);
    const usPerMessage = (facadeMs * 1000) / Math.max(1, delivery.delivered);
    const perMessage = (pick) =>
      (byThread.reduce((sum, t) => sum + pick(t), 0) * 1000) / Math.max(1, delivery.delivered);
    // Each facade's samples, scaled to what each of its threads used per message; summed over the facades.
    const where = {};
    perfs.forEach(({ pid, file }, k) => {
      const t = byThread[k];
      const us = (ms) => (ms * 1000) / Math.max(1, delivery.delivered);
      const parts = microsecondsByPart(splitPerf(file, pid, t.writerTid), {
        main: us(t.main),
        writer: us(t.writer),
        rest: us(t.rest),
      });
      for (const [thread, byPart] of Object.entries(parts)) {
        where[thread] ??= {};
        for (const [part, value] of Object.entries(byPart)) where[thread][part] = (where[thread][part] ?? 0) + value;
      }
    });
    return {
      where: perfs.length > 0 ? where : undefined,
      threads: {
        main: perMessage((t) => t.main),
        writer: perMessage((t) => t.writer),
        rest: perMessage((t) => t.rest),
      },
      run,
      delivery,
      clocks,
      timedOut: arrived.timedOut,
      cpu: cpuUsed,
      usPerMessage,
      loopDelay,
      worstLoop: worstLoopDelay(Object.values(loopDelay)),
    };
  } finally {
    await fleet.close();
  }
}

/** Every build's realtime runs, the builds alternating within each round. */
async function measureRounds({ options, contenders, privateKeyPem, p99Goal }) {
  const { poster, uids } = await preparePoster({ options, privateKeyPem });
  const runs = Object.fromEntries(contenders.map((c) => [c.name, []]));
  try {
    for (let round = 0; round < options.rounds; round += 1) {
      // Which build goes first alternates too: neither always runs on a machine the other has just warmed.
      const order = round % 2 === 0 ? contenders : [...contenders].reverse();
      for (const contender of order) {
        const m = await measureDelivery({ options, contender, poster, uids, round, p99Goal });
        runs[contender.name].push(m);
        console.log(
          `  ${contender.name}, round ${round + 1}: p50 ${fmt(m.delivery.p50, 2)} / p99 ${fmt(m.delivery.p99, 2)} ms, ${m.delivery.lost} lost, ${fmt(m.usPerMessage, 1)} µs per message (threads ${fmt(m.threads.main, 0)} / ${fmt(m.threads.writer, 0)} / ${fmt(m.threads.rest, 0)}), loop ${describeLoopDelay(m.worstLoop)}, other load ${fmt(m.cpu.others, 0)} %`,
        );
      }
    }
  } finally {
    await poster.call('close').catch(() => undefined);
    await poster.stop();
  }
  return runs;
}

const clean = (m) =>
  m.delivery.lost === 0 &&
  m.run.failed === 0 &&
  m.delivery.duplicates === 0 &&
  m.delivery.misrouted === 0 &&
  !m.timedOut;
const list = (values, digits) => values.map((v) => fmt(v, digits)).join(', ');

/** One column of the table per build: medians of its rounds, and every round where the spread matters. */
function realtimeRows(contenders, runs, ingest, { p99Goal, ingestGoal, cpuGoal, options }) {
  const col = (fn) => contenders.map((c) => fn(runs[c.name], c.name));
  const last = (ms) => ms.at(-1);
  const med = (ms, fn) => median(ms.map(fn));
  const rounds = options.rounds > 1;
  return [
    [
      'webhook ack p50 / p99 (in the poster process)',
      ...col(
        (ms) =>
          `${fmt(
            med(ms, (m) => m.run.ackP50),
            2,
          )} / ${fmt(
            med(ms, (m) => m.run.ackP99),
            2,
          )} ms`,
      ),
      '',
    ],
    [
      `webhook → subscriber p50 / p99 / p99.9 / max${rounds ? ' (median of the rounds; p99 of each)' : ''}`,
      ...col(
        (ms) =>
          `${fmt(
            med(ms, (m) => m.delivery.p50),
            2,
          )} / **${fmt(
            med(ms, (m) => m.delivery.p99),
            2,
          )}** / ${fmt(
            med(ms, (m) => m.delivery.p999),
            2,
          )} / ${fmt(
            med(ms, (m) => m.delivery.max),
            2,
          )} ms${
            rounds
              ? ` (${list(
                  ms.map((m) => m.delivery.p99),
                  1,
                )})`
              : ''
          }`,
      ),
      `p99 ≤ ${p99Goal} ms`,
    ],
    [
      `CPU per delivered message (the facade${contenders[0].facades.length > 1 ? 's' : ''}, all threads)${rounds ? ' (median; each round)' : ''}`,
      ...col(
        (ms) =>
          `**${fmt(
            med(ms, (m) => m.usPerMessage),
            1,
          )} µs**${
            rounds
              ? ` (${list(
                  ms.map((m) => m.usPerMessage),
                  1,
                )})`
              : ''
          }`,
      ),
      cpuGoal ? `≤ ${cpuGoal} µs` : '',
    ],
    [
      `of which, by thread: main / the SQLite writer${contenders[0].facades.length > 1 ? ' (none on Redis)' : ''} / V8's and libuv's helpers (median)`,
      ...col(
        (ms) =>
          `${fmt(
            med(ms, (m) => m.threads.main),
            1,
          )} / ${fmt(
            med(ms, (m) => m.threads.writer),
            1,
          )} / ${fmt(
            med(ms, (m) => m.threads.rest),
            1,
          )} µs`,
      ),
      '',
    ],
    [
      `event-loop delay during the run, max / p99 (from /metrics${contenders[0].facades.length > 1 ? '; per instance' : ''}; the worst round)`,
      ...col((ms) => {
        const worst = ms.reduce(
          (a, m) => (!a || (m.worstLoop?.maxMs ?? 0) > (a.worstLoop?.maxMs ?? 0) ? m : a),
          undefined,
        );
        return contenders[0].facades.length > 1
          ? describeLoopDelays(worst.loopDelay)
          : describeLoopDelay(worst.worstLoop);
      }),
      `max ≤ ${LOOP_GOAL_MS} ms`,
    ],
    [
      `events whose slowest subscriber waited over ${p99Goal} ms (runs of consecutive events; longest), last round`,
      ...col(
        (ms) =>
          `${last(ms).delivery.slowEvents} (${last(ms).delivery.slowRuns}; ${last(ms).delivery.longestRun} = ${fmt((last(ms).delivery.longestRun * 1000) / options.rate, 0)} ms of sending)`,
      ),
      '',
    ],
    [
      'events acknowledged, every round',
      ...col((ms) =>
        list(
          ms.map((m) => m.run.acknowledged),
          0,
        ),
      ),
      thousands(options.seconds * options.rate),
    ],
    [
      'messages delivered (of those expected), every round',
      ...col((ms) => ms.map((m) => `${m.delivery.delivered} (of ${m.delivery.expected})`).join(', ')),
      '',
    ],
    [
      'messages lost, every round',
      ...col((ms) =>
        list(
          ms.map((m) => m.delivery.lost),
          0,
        ),
      ),
      '0',
    ],
    [
      'messages duplicated or to the wrong subscriber',
      ...col((ms) => String(ms.reduce((sum, m) => sum + m.delivery.duplicates + m.delivery.misrouted, 0))),
      '0',
    ],
    ['webhooks refused or failed', ...col((ms) => String(ms.reduce((sum, m) => sum + m.run.failed, 0))), '0'],
    [
      'poster behind its schedule, p99 / max (worst round)',
      ...col(
        (ms) =>
          `${fmt(Math.max(...ms.map((m) => m.run.lateP99)), 2)} / ${fmt(Math.max(...ms.map((m) => m.run.lateMax)), 2)} ms`,
      ),
      '',
    ],
    [
      'poster ↔ subscriber clocks (difference ± bound), last round',
      ...col((ms) => describeAgreement(last(ms).clocks)),
      '',
    ],
    ['CPU during the run, % of one core, last round', ...col((ms) => describeCpu(last(ms).cpu, os.cpus().length)), ''],
    ...(ingest
      ? [
          [
            `max verified-and-stored events/s (median of ${ingest[contenders[0].name].rounds})`,
            ...col((_ms, name) => {
              const i = ingest[name];
              return `**${thousands(i.rate)}**${i.rounds > 1 ? ` (rounds ${thousands(i.min)}–${thousands(i.max)})` : ''}${i.failed ? `, ${i.failed} refused or failed` : ''}`;
            }),
            `≥ ${thousands(ingestGoal)}`,
          ],
          [
            'CPU during ingest, % of one core (last round)',
            ...col((_ms, name) => describeCpu(ingest[name].cpu, os.cpus().length)),
            '',
          ],
        ]
      : []),
  ];
}

/** This checkout's goal cells. `ids`: { realtime, cpu, loop, ingest } (any may be absent). */
function realtimeGoals(ms, ingest, { ids, p99Goal, ingestGoal, cpuGoal }) {
  const p99s = ms.map((m) => m.delivery.p99);
  const usPer = median(ms.map((m) => m.usPerMessage));
  const others = fmt(Math.max(...ms.map((m) => m.cpu.others)), 0);
  const worstLoop = worstLoopDelay(ms.map((m) => m.worstLoop));
  const goals = [];
  if (ids.realtime) {
    goals.push({
      id: ids.realtime,
      measured: `**p99 ${list(p99s, 2)} ms, ${ms.reduce((sum, m) => sum + m.delivery.lost, 0)} lost${cpuGoal && !ids.cpu ? `, ${fmt(usPer, 1)} µs per message` : ''}** (${ms.length} run(s); p50 ${fmt(median(ms.map((m) => m.delivery.p50)), 2)} ms; ${ms.at(-1).delivery.delivered} messages a run; other load up to ${others} % of a core)`,
      met: ms.every((m) => m.delivery.p99 <= p99Goal && clean(m)) && (!cpuGoal || ids.cpu || usPer <= cpuGoal),
    });
  }
  if (ids.cpu)
    goals.push({
      id: ids.cpu,
      measured: `**${fmt(usPer, 1)} µs** (median of ${ms.length}: ${list(
        ms.map((m) => m.usPerMessage),
        1,
      )})`,
      met: usPer <= cpuGoal,
    });
  if (ids.loop)
    goals.push({
      id: ids.loop,
      measured: `**max ${fmt(worstLoop?.maxMs, 1)} ms** (p99 ${fmt(worstLoop?.p99Ms, 1)} ms; worst of ${ms.length} run(s))`,
      met: worstLoop !== undefined && worstLoop.maxMs <= LOOP_GOAL_MS,
    });
  if (ids.ingest && ingest) {
    goals.push({
      id: ids.ingest,
      measured: `**${thousands(ingest.rate)}/s** (${ingest.rounds > 1 ? `rounds ${thousands(ingest.min)}–${thousands(ingest.max)}; ` : ''}other load ${fmt(ingest.cpu.others, 0)} % of a core)`,
      met: ingest.rate >= ingestGoal && ingest.failed === 0,
    });
  }
  return goals;
}

const method = (options, ingest, fleetWhere) =>
  `${thousands(options.subscribers)} graphql-ws subscribers (${options.deliveries} deliveries × ${options.perDelivery}, one \`deliveryEvents(uids:)\` subscription per connection) ${fleetWhere}, in ${Math.max(1, options.processes ?? Math.ceil(options.subscribers / 5000))} process(es) of their own; ${thousands(Math.round(options.seconds * options.rate))} signed webhooks (signed ahead) posted at ${options.rate}/s, open loop, from another, after ${WARM_SECONDS} s at the rate not counted (the facade and the load compiled); latency from the poster's send (the start of its POST) to the subscriber's message, both read on the machine's monotonic clock (CLOCK_MONOTONIC, which every process shares), the processes' readings checked against each other over IPC just before the run (the row below). CPU per message: the facade processes' CPU time over all their threads (\`/proc/<pid>/stat\`) during the run, divided by the messages delivered. Event-loop delay: the facade's own \`delivery_graph_event_loop_delay_*\` (a 2 ms timer; a build without them: prom-client's, 10 ms), read just before and after the run.${options.rounds > 1 ? ` ${options.rounds} rounds per build, the builds alternating (and which goes first), each with a fresh fleet and warm-up.` : ''}${ingest ? ` Ingest: ${ingest[Object.keys(ingest)[0]].rounds} round(s) of ${thousands(ingest[Object.keys(ingest)[0]].perRound)} distinct signed events, ${INGEST_IN_FLIGHT} in flight, from a third process, to deliveries nobody subscribes to, after the realtime runs; the median round.` : ''}`;

const buildsNote = (contenders) =>
  contenders.length > 1
    ? ` Builds: ${contenders.map((c) => `${c.name} (\`${c.entry}\`)`).join(' and ')}, started once each and measured alternately.`
    : '';

const THREAD_NAMES = {
  main: 'main thread',
  writer: 'the SQLite writer thread',
  rest: "V8's and libuv's helper threads",
};

/**
 * With --perf: where each build's CPU per message went, by thread and part of the path (bench/lib/perf.mjs), the mean
 * of its rounds. Written as a section of its own; the run's own table is not recorded (sampling costs a little).
 */
function writeWhere({ contenders, runs, options, id, title, command, quick }) {
  const mean = (name, pick) => {
    const values = runs[name].map((m) => pick(m) ?? 0);
    return values.reduce((sum, v) => sum + v, 0) / Math.max(1, values.length);
  };
  const rows = [];
  for (const [thread, label] of Object.entries(THREAD_NAMES)) {
    const totals = contenders.map((c) => mean(c.name, (m) => m.threads[thread]));
    rows.push([`**${label}**`, ...totals.map((v) => `**${fmt(v, 1)}**`)]);
    for (const part of [...PARTS.map(([name]) => name), OTHER]) {
      const values = contenders.map((c) => mean(c.name, (m) => m.where?.[thread]?.[part]));
      if (values.every((v) => v < 0.5)) continue;
      rows.push([`  ${part}`, ...values.map((v) => fmt(v, 1))]);
    }
  }
  rows.push([
    '**all threads (CPU per delivered message)**',
    ...contenders.map(
      (c) =>
        `**${fmt(
          mean(c.name, (m) => m.usPerMessage),
          1,
        )}**`,
    ),
  ]);
  const body = [
    `µs of CPU per delivered message, by thread (from \`/proc/<pid>/task/*/stat\` over the measured run) and, within each thread, by part of the path: Linux \`perf record -e cpu-clock -g\` samples of the facade${contenders[0].facades.length > 1 ? 's' : ''} over the same run (on-CPU time only; JIT frames named by \`--perf-basic-prof\`), each sample given to the first part one of its frames belongs to, innermost first (bench/lib/perf.mjs), and each thread's shares scaled to its µs. Mean of ${options.rounds} round(s) per build; the shape and method are the section's above.`,
    '',
    table(['where', ...contenders.map((c) => c.name)], rows),
  ].join('\n');
  writeSection(`where-${id}`, `Where the microseconds go: ${title}`, body, { command, quick });
}

export async function realtime({ quick, command, flags = {}, defaults }) {
  const options = runOptions(flags, quick, defaults);
  if (options.perf && !perfAvailable()) throw new Error('--perf: `perf record` does not work here');
  const { publicKeyPem, privateKeyPem } = keyPair();
  const upstream = await startUpstream();
  const contenders = [];
  for (const build of builds(options)) {
    const facade = await startFacade(upstream.url, { publicKeyPem, label: 'realtime', ...build.start });
    contenders.push({
      name: build.name,
      entry: build.start.entry ?? 'dist/main.js',
      process: facade,
      facades: [{ name: 'facade', origin: facade.origin, pid: facade.child.pid }],
      servers: [{ name: 'facade', pid: facade.child.pid }],
      postOrigin: facade.origin,
      subscribeOrigins: [facade.origin],
    });
  }
  const targets = options.scale
    ? { ids: { realtime: 'realtime-scale', loop: 'loop-realtime-scale' }, p99Goal: 50, cpuGoal: 45 }
    : options.standard
      ? {
          ids: { realtime: 'realtime', cpu: 'realtime-cpu', loop: 'loop-realtime', ingest: 'ingest' },
          p99Goal: 10,
          cpuGoal: 80,
          ingestGoal: 8_000,
        }
      : options.one
        ? { ids: { realtime: 'realtime-one', loop: 'loop-realtime-one' }, p99Goal: 20, cpuGoal: 200 }
        : { ids: {}, p99Goal: 10 };
  // The ingest only in the standard shape (its goal is the same whatever the fleet).
  const ingest = options.standard ? prepareIngest({ quick, privateKeyPem }) : undefined;
  try {
    const runs = await measureRounds({ options, contenders, privateKeyPem, p99Goal: targets.p99Goal });
    const i = ingest ? await measureIngest(ingest, contenders) : undefined;
    const id = options.scale
      ? 'realtime-scale'
      : options.standard
        ? 'realtime'
        : options.one
          ? 'realtime-one'
          : `realtime-${options.subscribers}x${options.perDelivery}-at-${options.rate}`;
    const title = options.scale
      ? 'Realtime at scale: 10,000 subscribers on one instance'
      : options.standard
        ? 'Realtime: webhooks to subscribers'
        : options.one
          ? 'Realtime, the common case: one watcher per delivery'
          : `Realtime: ${thousands(options.subscribers)} subscribers, ${options.perDelivery} per delivery, ${options.rate} events/s`;
    const rss = contenders.map((c) => `${c.name} ${fmt(c.process.rssKb() / 1024, 0)} MiB`).join(', ');
    const body = [
      `One instance on the embedded SQLite store. ${method(options, i, 'on it')}${buildsNote(contenders)} Resident memory of the facade after the runs (the fleet closed): ${rss}.`,
      '',
      table(
        ['metric', ...contenders.map((c) => c.name), 'goal'],
        realtimeRows(contenders, runs, i, { ...targets, options }),
      ),
    ].join('\n');
    if (options.perf) writeWhere({ contenders, runs, options, id, title, command, quick });
    else
      writeSection(id, title, body, {
        command,
        quick,
        goals: realtimeGoals(runs[contenders[0].name], i?.[contenders[0].name], targets),
      });
  } finally {
    await Promise.all([upstream.stop(), ...contenders.map((c) => c.process.stop())]);
  }
}

export const realtimeScale = (args) =>
  realtime({ ...args, defaults: { subscribers: '10000', 'per-delivery': '100', rate: '100' } });

/** The common case: 1,000 deliveries, each followed by one subscriber (a tracking page), 1,000 webhooks/s. */
export const realtimeOne = (args) =>
  realtime({ ...args, defaults: { subscribers: '1000', 'per-delivery': '1', rate: '1000' } });

/**
 * The same measurement across two instances sharing Redis, per build (each its
 * own redis-server): webhooks to A, the subscribers on B (or half on each,
 * --subscribers-on=both); then ingest on A alone.
 */
export async function realtimeRedis({ quick, command, flags = {}, defaults }) {
  const options = runOptions(flags, quick, { scaleSubscribers: 20_000, ...defaults });
  if (options.perf && !perfAvailable()) throw new Error('--perf: `perf record` does not work here');
  const { publicKeyPem, privateKeyPem } = keyPair();
  const upstream = await startUpstream();
  const contenders = [];
  const redises = [];
  try {
    for (const build of builds(options)) {
      const redis = await startRedis();
      redises.push(redis);
      // Both instances must accept each other's client tokens, so Redis needs a shared secret.
      const env = { REDIS_URL: redis.url, CLIENT_TOKEN_SECRET: 'bench-client-token-secret-shared-by-instances' };
      const a = await startFacade(upstream.url, { publicKeyPem, env, label: 'realtime-redis-A', ...build.start });
      const b = await startFacade(upstream.url, { publicKeyPem, env, label: 'realtime-redis-B', ...build.start });
      contenders.push({
        name: build.name,
        entry: build.start.entry ?? 'dist/main.js',
        redis,
        a,
        b,
        facades: [
          { name: 'A', origin: a.origin, pid: a.child.pid },
          { name: 'B', origin: b.origin, pid: b.child.pid },
        ],
        servers: [
          { name: 'A', pid: a.child.pid },
          { name: 'B', pid: b.child.pid },
          { name: 'redis-server', pid: redis.child.pid },
        ],
        postOrigin: a.origin,
        subscribeOrigins: options.subscribersOn === 'both' ? [b.origin, a.origin] : [b.origin],
      });
    }
    const targets = options.scale
      ? { ids: { realtime: 'realtime-redis-scale', loop: 'loop-realtime-redis-scale' }, p99Goal: 50, cpuGoal: 45 }
      : options.standard
        ? {
            ids: { realtime: 'realtime-redis', loop: 'loop-realtime-redis', ingest: 'ingest-redis' },
            p99Goal: 15,
            cpuGoal: 100,
            ingestGoal: 2_000,
          }
        : { ids: {}, p99Goal: 15 };
    const ingest = options.standard ? prepareIngest({ quick, privateKeyPem }) : undefined;
    const runs = await measureRounds({ options, contenders, privateKeyPem, p99Goal: targets.p99Goal });
    const rss = contenders
      .map((c) => `${c.name} A ${fmt(c.a.rssKb() / 1024, 0)} / B ${fmt(c.b.rssKb() / 1024, 0)} MiB`)
      .join(', ');
    // Ingest is on one instance: every B goes first.
    for (const c of contenders) {
      await c.b.stop();
      c.servers = c.servers.filter((server) => server.name !== 'B');
    }
    const i = ingest ? await measureIngest(ingest, contenders) : undefined;
    const where =
      options.subscribersOn === 'both'
        ? 'half on instance A, half on B (the subscribers of each delivery alternate)'
        : 'on instance B';
    const id = options.scale
      ? 'realtime-redis-scale'
      : options.standard
        ? 'realtime-redis'
        : `realtime-redis-${options.subscribers}x${options.perDelivery}-at-${options.rate}`;
    const title = options.scale
      ? 'Realtime at scale across instances on Redis: 20,000 subscribers'
      : options.standard
        ? 'Realtime across instances on Redis'
        : `Realtime across instances on Redis: ${thousands(options.subscribers)} subscribers, ${options.perDelivery} per delivery, ${options.rate} events/s`;
    const body = [
      `Two instances sharing one Redis (${contenders[0].redis.version}, \`appendonly yes\`, \`appendfsync always\`, on this machine; each build its own): webhooks posted to instance A, the subscribers ${where}. ${method(options, i, where)}${buildsNote(contenders)} CPU per message counts both instances. Resident memory after the runs: ${rss}.${i ? ' Ingest runs on A alone, B stopped by then.' : ''}`,
      '',
      table(
        ['metric', ...contenders.map((c) => c.name), 'goal'],
        realtimeRows(contenders, runs, i, { ...targets, options }),
      ),
    ].join('\n');
    // The per-message goal is part of the realtime cell here (one id for both, as the goals table has it).
    if (options.perf) writeWhere({ contenders, runs, options, id, title, command, quick });
    else
      writeSection(id, title, body, {
        command,
        quick,
        goals: realtimeGoals(runs[contenders[0].name], i?.[contenders[0].name], targets),
      });
  } finally {
    await Promise.all([upstream.stop(), ...contenders.flatMap((c) => [c.a.stop(), c.b.stop()])]);
    for (const redis of redises) await redis.stop();
  }
}

export const realtimeRedisScale = (args) =>
  realtimeRedis({
    ...args,
    defaults: { subscribers: '20000', 'per-delivery': '100', rate: '100', 'subscribers-on': 'both' },
  });

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
  const options = runOptions({ rounds: '1' }, quick);
  const results = [];
  for (const [label, acks] of [
    ['no replica acknowledgement (REDIS_MIN_REPLICAS_ACK=0)', '0'],
    ['one replica acknowledging (the default with a replica)', undefined],
  ]) {
    // The same events again would be duplicates, which are stored once and published once: each setting starts empty.
    spawnSync('redis-cli', ['-p', String(primary.port), 'flushall'], { stdio: 'ignore' });
    const env = {
      REDIS_URL: primary.url,
      CLIENT_TOKEN_SECRET: 'bench-client-token-secret-shared-by-instances',
      ...(acks === undefined ? {} : { REDIS_MIN_REPLICAS_ACK: acks }),
    };
    const a = await startFacade(upstream.url, { publicKeyPem, env, label: `replica-ack-${acks ?? 'default'}-A` });
    const b = await startFacade(upstream.url, { publicKeyPem, env, label: `replica-ack-${acks ?? 'default'}-B` });
    const ingest = prepareIngest({ quick, privateKeyPem });
    const contender = {
      name: label,
      facades: [
        { name: 'A', origin: a.origin, pid: a.child.pid },
        { name: 'B', origin: b.origin, pid: b.child.pid },
      ],
      servers: [
        { name: 'A', pid: a.child.pid },
        { name: 'B', pid: b.child.pid },
        { name: 'primary', pid: primary.child.pid },
        { name: 'replica', pid: replica.child.pid },
      ],
      postOrigin: a.origin,
      subscribeOrigins: [b.origin],
    };
    const runs = await measureRounds({ options, contenders: [contender], privateKeyPem, p99Goal: 25 });
    await b.stop();
    contender.servers = contender.servers.filter((server) => server.name !== 'B');
    const i = (await measureIngest(ingest, [contender]))[label];
    await a.stop();
    results.push({ label, m: runs[label][0], i });
  }
  const row = ({ label, m, i }) => [
    label,
    `${fmt(m.run.ackP50, 2)} / ${fmt(m.run.ackP99, 2)} ms`,
    `${fmt(m.delivery.p50, 2)} / ${fmt(m.delivery.p99, 2)} ms`,
    `${m.delivery.lost} / ${m.run.failed}`,
    `${fmt(m.usPerMessage, 1)} µs`,
    describeLoopDelays(m.loopDelay),
    `${thousands(i.rate)}${i.rounds > 1 ? ` (${thousands(i.min)}–${thousands(i.max)})` : ''}${i.failed ? `, ${i.failed} failed` : ''}`,
  ];
  const ingestShape = { [results[0].label]: results[0].i };
  const body = [
    `A Redis primary and one replica (${primary.version}, both \`appendonly yes\`, \`appendfsync always\`, on this machine), two instances: webhooks to A, subscribers on B, then ingest on A alone. Measured first without waiting for the replica, then with the default (every stored batch waits until the replica confirms it, Redis \`WAIT 1\`), in one run. ${method(options, ingestShape, 'on instance B')}`,
    '',
    table(
      [
        'setting',
        'webhook ack p50 / p99',
        'webhook → subscriber p50 / p99',
        'lost / webhooks failed',
        'CPU per message (A + B)',
        'event-loop delay max / p99',
        'max stored events/s (median; rounds)',
      ],
      results.map(row),
    ),
    '',
    `With the replica acknowledging: ingest ${fmt(results[1].i.rate / results[0].i.rate, 2)}× that without, subscriber p99 ${fmt(Math.abs(results[1].m.delivery.p99 - results[0].m.delivery.p99), 2)} ms ${results[1].m.delivery.p99 >= results[0].m.delivery.p99 ? 'higher' : 'lower'} (one run of each, the second right after the first: differences of this size are within this machine's run-to-run noise).`,
  ].join('\n');
  writeSection('redis-replica-ack', 'Redis with a replica acknowledging', body, { command, quick });
  await upstream.stop();
  await replica.stop();
  await primary.stop();
}

/**
 * Fan-out and memory: 10,000 subscribers (10 per delivery) on one instance, what
 * each costs in resident memory, one event to its 10 subscribers, and a burst of
 * one event per delivery to all of them (after one such burst not counted), with
 * the facade's CPU per message and event-loop delay over the burst. With
 * --baseline, the baseline's build goes through the same after this checkout's.
 */
export async function fanOut({ quick, command, flags = {} }) {
  const baselineDir = flags.baseline && resolve(flags.baseline);
  const { publicKeyPem, privateKeyPem } = keyPair();
  const upstream = await startUpstream();
  const perDelivery = 10;
  const deliveries = quick ? 100 : 1000;
  const fleetSize = deliveries * perDelivery;
  const uids = Array.from({ length: deliveries }, (_, d) => uidOf(d));
  const SINGLES = 20;
  const poster = forkWorker('webhook-poster');
  await poster.call('init', { origin: 'http://127.0.0.1:9', privateKeyPem });
  await Promise.all([
    poster.call('prepare', {
      name: 'warm-up',
      events: uids.map((uid) => ({ uid, event_name: 'delivery.created', status: 'warm-up' })),
    }),
    poster.call('prepare', {
      name: 'singles',
      events: Array.from({ length: SINGLES }, (_, k) => ({
        uid: uids[k % deliveries],
        event_name: 'delivery.dropoff_enroute',
        status: `single-${k}`,
      })),
    }),
    poster.call('prepare', {
      name: 'warm-burst',
      events: uids.map((uid) => ({ uid, event_name: 'delivery.pickup_complete', status: 'warm-burst' })),
    }),
    poster.call('prepare', {
      name: 'burst',
      events: uids.map((uid) => ({ uid, event_name: 'delivery.dropoff_arrived', status: 'burst' })),
    }),
  ]);
  const results = [];
  try {
    for (const build of builds({ baselineDir })) {
      const facade = await startFacade(upstream.url, { publicKeyPem, label: 'fan-out', ...build.start });
      try {
        await poster.call('retarget', { origin: facade.origin });
        await sleep(500);
        const idleRss = facade.rssKb();
        const fleet = await startFleet({
          origins: [facade.origin],
          key: KEY,
          subscribers: fleetSize,
          uids,
          processes: 1,
        });
        try {
          await poster.call('burst', { name: 'warm-up' });
          const warm = await fleet.waitForTag({ tag: 'warm-up', count: 'all', timeoutMs: 60_000 });
          if (warm.timedOut) throw new Error(`only ${warm.count} of ${fleetSize} subscribers got the warm-up event`);
          await sleep(1000);
          const loadedRss = facade.rssKb();
          const clocks = await fleet.clocks(poster);

          // One event: from its send until the last of its delivery's subscribers has it.
          const singles = [];
          for (let k = 0; k < SINGLES; k += 1) {
            const { sentAt } = await poster.call('postOne', { name: 'singles', index: k });
            const got = await fleet.waitForTag({ tag: `single-${k}`, ofEvent: k, timeoutMs: 10_000 });
            if (got.timedOut) throw new Error(`event single-${k} reached ${got.count} of ${perDelivery} subscribers`);
            singles.push(got.last - sentAt);
          }
          // A burst, not counted: the burst path compiled.
          await poster.call('burst', { name: 'warm-burst' });
          await fleet.waitForTag({ tag: 'warm-burst', count: 'all', timeoutMs: 60_000 });

          // The burst: one event to every delivery at once; until every subscriber has its own.
          const loop = await loopDelayWindow([{ name: 'facade', origin: facade.origin }]);
          const cpu = cpuMeter([
            { name: 'facade', pid: facade.child.pid },
            ...fleet.processes,
            { name: 'poster', pid: poster.pid },
          ]);
          const burst = await poster.call('burst', { name: 'burst' });
          const got = await fleet.waitForTag({ tag: 'burst', count: 'all', timeoutMs: 60_000 });
          const cpuUsed = cpu.stop();
          const loopDelay = (await loop.stop()).facade;
          if (got.timedOut) throw new Error(`the burst reached ${got.count} of ${fleetSize} subscribers`);
          results.push({
            name: build.name,
            entry: build.start.entry ?? 'dist/main.js',
            idleRss,
            loadedRss,
            clocks,
            singles: median(singles),
            burstMs: got.last - burst.startedAt,
            usPerMessage: (cpuUsed.msByName.facade * 1000) / fleetSize,
            loopDelay,
          });
        } finally {
          await fleet.close();
        }
      } finally {
        await facade.stop();
      }
    }
  } finally {
    await poster.call('close').catch(() => undefined);
    await poster.stop();
    await upstream.stop();
  }
  const col = (fn) => results.map(fn);
  const body = [
    `${fleetSize} concurrent graphql-ws connections, one \`deliveryEvents(uids:)\` subscription each, ${perDelivery} per delivery, in a process of their own; the webhooks from another. Memory is the facade's resident set (VmRSS) after the subscribers connected and one event reached each, minus its idle resident set. The burst is measured after one burst not counted; CPU per message is the facade's CPU time (all threads) during the burst over the ${fleetSize} messages; the event-loop delay is read from its /metrics just before and after the burst.${results.length > 1 ? ` Builds: ${results.map((r) => `${r.name} (\`${r.entry}\`)`).join(' and ')}, one after the other, each with a fresh fleet.` : ''}`,
    '',
    table(
      ['metric', ...col((r) => r.name), 'goal'],
      [
        [
          'resident memory idle → with subscribers',
          ...col((r) => `${fmt(r.idleRss / 1024, 0)} → ${fmt(r.loadedRss / 1024, 0)} MiB`),
          '',
        ],
        [
          'resident memory per subscriber',
          ...col((r) => `${fmt((r.loadedRss - r.idleRss) / fleetSize, 1)} KB`),
          '≤ 30 KB',
        ],
        [
          `one event → all ${perDelivery} subscribers of its delivery (median of ${SINGLES})`,
          ...col((r) => `${fmt(r.singles, 2)} ms`),
          '',
        ],
        [`burst: one event per delivery → all ${fleetSize} subscribers`, ...col((r) => `${fmt(r.burstMs, 0)} ms`), ''],
        ['poster ↔ subscriber clocks (difference ± bound)', ...col((r) => describeAgreement(r.clocks)), ''],
        [
          'CPU per message during the burst (the facade, all threads)',
          ...col((r) => `${fmt(r.usPerMessage, 1)} µs`),
          '',
        ],
        ['event-loop delay during the burst, max / p99', ...col((r) => describeLoopDelay(r.loopDelay)), ''],
      ],
    ),
  ].join('\n');
  writeSection('fan-out', 'Fan-out and memory', body, { command, quick });
}

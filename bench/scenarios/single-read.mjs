// Single read: delivery(uid) selecting about 25 fields, against a fixed-response
// upstream, for four contenders run alternately in one session: direct GET (the
// ceiling), a plain undici reverse proxy (the limit for a Node proxy),
// delivery-graph, and GraphQL Mesh on Hive Gateway (what a user would pick instead).
// The load (autocannon, then the fixed-rate client) comes from a process of its own.
import os from 'node:os';
import { basename, join, resolve } from 'node:path';
import { startFacade, startMeshContender, startReverseProxy, startUpstream } from '../lib/contenders.mjs';
import { cpuMeter } from '../lib/cpu.mjs';
import { describeLoopDelay, loopDelayWindow, worstLoopDelay } from '../lib/loop-delay.mjs';
import { PLATFORM_ID } from '../lib/fixed-upstream.mjs';
import { fmt, table, thousands, writeSection } from '../lib/report.mjs';
import { UID_SLOT } from '../lib/load.mjs';
import { median, spread } from '../lib/stats.mjs';
import { forkWorker } from '../lib/worker.mjs';
import { MESH_SINGLE_READ } from '../mesh/queries.mjs';

export const KEY = 'sk_bench_merchant';

export const FACADE_SINGLE_READ = `query Read($uid: ID!) {
  delivery(uid: $uid) {
    uid status rawStatus
    price { amount currency } distance { value unit } tip
    pickup { name phone address { street city } windowStart }
    dropoff { name phone address { street city } }
    courier { name location { lat lng } }
    trackingUrl deliveryDate estimatedDropoffAt
    package { description itemsCount weight declaredValue }
    expectedCancellationFee { amount currency }
  }
}`;

/**
 * The single read as a load request (autocannon, 32 connections, a fresh uid per request) against a facade at `origin`.
 */
export function facadeReadLoad(origin) {
  return {
    url: `${origin}/graphql`,
    method: 'POST',
    headers: { 'content-type': 'application/json', authorization: `Bearer ${KEY}` },
    body: JSON.stringify({ query: FACADE_SINGLE_READ, variables: { uid: UID_SLOT } }),
    uniqueIds: true,
    graphql: true,
    connections: 32,
  };
}

/** `--name=value` flags of a probe's command line. */
export const probeFlags = () =>
  Object.fromEntries(
    process.argv
      .slice(2)
      .filter((arg) => arg.startsWith('--'))
      .map((arg) => arg.slice(2).split(/=(.*)/s, 2)),
  );

export async function singleRead({ quick, command, flags = {} }) {
  const duration = quick ? 3 : 10;
  const rounds = quick ? 1 : 3;
  const upstream = await startUpstream();
  const proxy = await startReverseProxy(upstream.origin);
  const facade = await startFacade(upstream.url, { label: 'single-read' });
  // --baseline=<checkout>: that checkout's build too, side by side in the same rounds (old code against new).
  const baselineDir = flags.baseline && resolve(flags.baseline);
  const baseline = baselineDir
    ? await startFacade(upstream.url, {
        label: 'single-read-baseline',
        entry: join(baselineDir, 'dist/main.js'),
        cwd: baselineDir,
      })
    : undefined;
  const mesh = await startMeshContender(upstream.url).catch((error) => {
    console.error(`Mesh did not start: ${error.message}`);
    return undefined;
  });
  const http = forkWorker('http-load');
  const auth = { authorization: `Bearer ${KEY}` };
  const json = { 'content-type': 'application/json', ...auth };
  // Every request reads a delivery of its own (UID_SLOT, replaced per request): the facade's sharing of
  // identical in-flight reads would otherwise spare it most upstream calls that the proxy makes.
  const path = `/api/v1/${PLATFORM_ID}/deliveries/${UID_SLOT}`;
  const DIRECT = 'direct GET (ceiling)';
  const PROXY = 'undici reverse proxy';
  const FACADE = 'delivery-graph';
  const MESH = 'Mesh + Hive Gateway';
  const BASELINE = `delivery-graph at ${baselineDir ? basename(baselineDir) : ''}`;
  // `pid`: the contender's process, whose CPU is counted (the direct GET has none but the upstream).
  const contenders = [
    { name: DIRECT, url: `${upstream.origin}${path}`, headers: auth, uniqueIds: true },
    { name: PROXY, url: `${proxy.origin}${path}`, headers: auth, pid: proxy.child.pid, uniqueIds: true },
    {
      name: FACADE,
      url: `${facade.origin}/graphql`,
      method: 'POST',
      headers: json,
      body: JSON.stringify({ query: FACADE_SINGLE_READ, variables: { uid: UID_SLOT } }),
      pid: facade.child.pid,
      metricsOrigin: facade.origin,
      uniqueIds: true,
      graphql: true,
    },
    ...(baseline
      ? [
          {
            name: BASELINE,
            url: `${baseline.origin}/graphql`,
            method: 'POST',
            headers: json,
            body: JSON.stringify({ query: FACADE_SINGLE_READ, variables: { uid: UID_SLOT } }),
            pid: baseline.child.pid,
            metricsOrigin: baseline.origin,
            uniqueIds: true,
            graphql: true,
          },
        ]
      : []),
    ...(mesh
      ? [
          {
            name: MESH,
            url: `${mesh.origin}/graphql`,
            method: 'POST',
            headers: json,
            body: JSON.stringify({ query: MESH_SINGLE_READ, variables: { uid: UID_SLOT, platform: PLATFORM_ID } }),
            pid: mesh.child.pid,
            uniqueIds: true,
            graphql: true,
          },
        ]
      : []),
  ];
  /**
   * Max-throughput load on one contender, with the CPU share (of one core) of it, the upstream, the load process and
   * anything else.
   */
  // The facades' event-loop delay over each measured run, from their /metrics (undefined for the others).
  const loopOf = async (metricsOrigin, run) => {
    const loop = metricsOrigin && (await loopDelayWindow([{ name: 'facade', origin: metricsOrigin }]));
    const result = await run();
    return { ...result, loop: loop && (await loop.stop()).facade };
  };
  const maxLoad = ({ pid, metricsOrigin, ...c }, seconds) =>
    loopOf(metricsOrigin, async () => {
      const cpu = cpuMeter([
        { name: 'contender', pid: pid ?? upstream.child.pid },
        { name: 'upstream', pid: upstream.child.pid },
        { name: 'load', pid: http.pid },
      ]);
      const result = await http.call('autocannon', { ...c, connections: 32, duration: seconds });
      return { ...result, cpu: cpu.stop() };
    });

  // Each contender answers correctly before it is measured.
  for (const c of contenders) {
    const response = await fetch(c.url, { method: c.method ?? 'GET', headers: c.headers, body: c.body });
    const text = await response.text();
    if (!response.ok || text.includes('"errors"'))
      throw new Error(`${c.name} answered ${response.status}: ${text.slice(0, 300)}`);
  }

  const results = Object.fromEntries(contenders.map((c) => [c.name, { max: [], fixed: [] }]));
  for (let round = 0; round < rounds; round += 1) {
    for (const c of contenders) {
      await maxLoad(c, 1); // warm-up
      results[c.name].max.push(await maxLoad(c, duration));
    }
    for (const { pid: _pid, metricsOrigin, ...c } of contenders) {
      // A second at the rate first: the previous contender's backlog drains, the client's connections open.
      await http.call('fixedRate', { ...c, rate: 200, duration: 1 });
      const fixed = await loopOf(metricsOrigin, async () => {
        const cpu = cpuMeter([{ name: 'load', pid: http.pid }]);
        return { ...(await http.call('fixedRate', { ...c, rate: 200, duration })), others: cpu.stop().others };
      });
      results[c.name].fixed.push(fixed);
    }
  }
  await http.stop();
  const summary = Object.fromEntries(
    Object.entries(results).map(([name, r]) => [
      name,
      {
        rps: median(r.max.map((x) => x.rps)),
        p50: median(r.max.map((x) => x.p50)),
        p99: median(r.max.map((x) => x.p99)),
        fixedP50: median(r.fixed.map((x) => x.p50)),
        fixedP99: median(r.fixed.map((x) => x.p99)),
        errors: [...r.max, ...r.fixed].reduce((sum, x) => sum + x.errors + (x.non2xx ?? 0), 0),
        cpu: ['contender', 'upstream', 'load'].map((name) => median(r.max.map((x) => x.cpu.byName[name]))),
        others: median(r.max.map((x) => x.cpu.others)),
        fixedOthers: median(r.fixed.map((x) => x.others)),
        loopAtMax: worstLoopDelay(r.max.map((x) => x.loop)),
        loopFixed: worstLoopDelay(r.fixed.map((x) => x.loop)),
      },
    ]),
  );
  const direct = summary[DIRECT];
  const rows = Object.entries(summary).map(([name, s]) => [
    name,
    fmt(s.rps, 0),
    fmt(s.p50, 0),
    fmt(s.p99, 0),
    fmt(s.fixedP50 - direct.fixedP50, 2),
    fmt(s.fixedP99 - direct.fixedP99, 2),
    String(s.errors),
    `${name === DIRECT ? '—' : fmt(s.cpu[0], 0)} / ${fmt(s.cpu[1], 0)} / ${fmt(s.cpu[2], 0)} / ${fmt(s.others, 0)}`,
  ]);
  const dg = summary[FACADE];
  // Per round: the ratio of that round's throughputs and its added p99, for the noise note.
  const perRound = (fn) => Array.from({ length: rounds }, (_, r) => fn(r));
  /** "; rounds 0.66–0.74×" after a median (nothing for a single round). */
  const range = (values, digits, unit) => {
    const { min, max } = spread(values);
    return rounds > 1 ? `; rounds ${fmt(min, digits)}–${fmt(max, digits)}${unit}` : '';
  };
  const vsProxy = dg.rps / summary[PROXY].rps;
  const vsProxyRounds = perRound((r) => results[FACADE].max[r].rps / results[PROXY].max[r].rps);
  const vsMesh = mesh ? dg.rps / summary[MESH].rps : NaN;
  const vsMeshRounds = mesh ? perRound((r) => results[FACADE].max[r].rps / results[MESH].max[r].rps) : [];
  const addedP99 = dg.fixedP99 - direct.fixedP99;
  const addedP99Rounds = perRound((r) => results[FACADE].fixed[r].p99 - results[DIRECT].fixed[r].p99);
  // What the rest of the machine took while the compared runs ran (the larger of the two medians), to tell a noisy
  // cell.
  const otherLoad = (...pcts) => `; other load ${fmt(Math.max(...pcts), 0)} % of a core`;
  const cpuPerRead = (name) => (summary[name].cpu[0] / 100 / summary[name].rps) * 1e6;
  const cpuRatio = cpuPerRead(FACADE) / cpuPerRead(PROXY);
  const goals = [
    {
      id: 'read-vs-proxy',
      measured: `**${fmt(vsProxy, 2)}×** (${thousands(dg.rps)} vs ${thousands(summary[PROXY].rps)} req/s${range(vsProxyRounds, 2, '×')}${otherLoad(dg.others, summary[PROXY].others)})`,
      met: vsProxy >= 0.7,
    },
    {
      id: 'read-cpu-vs-proxy',
      measured: `**${fmt(cpuRatio, 2)}×** (${fmt(cpuPerRead(FACADE), 0)} vs ${fmt(cpuPerRead(PROXY), 0)} µs${otherLoad(dg.others, summary[PROXY].others)})`,
      met: cpuRatio <= 1.8,
    },
    mesh
      ? {
          id: 'read-vs-mesh',
          measured: `**${fmt(vsMesh, 1)}×** (${thousands(dg.rps)} vs ${thousands(summary[MESH].rps)} req/s${range(vsMeshRounds, 1, '×')}${otherLoad(dg.others, summary[MESH].others)})`,
          met: vsMesh >= 7,
        }
      : { id: 'read-vs-mesh', measured: 'Mesh did not start in this run', met: false },
    {
      id: 'read-added-p99',
      measured: `**+${fmt(addedP99, 2)} ms** (p99 ${fmt(dg.fixedP99, 2)} vs ${fmt(direct.fixedP99, 2)} ms${range(addedP99Rounds, 2, ' ms')}${otherLoad(dg.fixedOthers, direct.fixedOthers)})`,
      met: addedP99 <= 2,
    },
    {
      id: 'loop-single-read',
      measured: `**max ${fmt(dg.loopFixed?.maxMs, 1)} ms** (p99 ${fmt(dg.loopFixed?.p99Ms, 1)} ms; the worst of ${rounds} run(s) at 200 req/s; at max throughput max ${fmt(dg.loopAtMax?.maxMs, 1)} ms)`,
      met: dg.loopFixed !== undefined && dg.loopFixed.maxMs <= 10,
    },
  ];
  const ratios = [
    `- delivery-graph / reverse proxy throughput: **${fmt(vsProxy, 2)}×** (goal ≥ 0.70×${range(vsProxyRounds, 2, '×')})`,
    mesh
      ? `- delivery-graph / Mesh throughput: **${fmt(vsMesh, 2)}×** (goal ≥ 7×${range(vsMeshRounds, 2, '×')})`
      : '- Mesh: did not start in this run',
    `- added latency at 200 req/s over the direct GET: p50 **${fmt(dg.fixedP50 - direct.fixedP50, 2)} ms**, p99 **${fmt(addedP99, 2)} ms** (goal p99 ≤ +2 ms${range(addedP99Rounds, 2, ' ms')})`,
  ];
  // CPU per read: the contender's share of one core at max throughput over its requests per second.
  ratios.push(
    `- CPU per read at max throughput: delivery-graph **${fmt(cpuPerRead(FACADE), 0)} µs**, reverse proxy ${fmt(cpuPerRead(PROXY), 0)} µs (**${fmt(cpuPerRead(FACADE) / cpuPerRead(PROXY), 2)}×**)`,
  );
  // The facades' event-loop delay: the longest hold of their loop, the worst of the rounds.
  const loopLine = (name) =>
    `${name}: at 200 req/s ${describeLoopDelay(summary[name].loopFixed)}, at max throughput ${describeLoopDelay(summary[name].loopAtMax)}`;
  ratios.push(
    `- event-loop delay (from /metrics, the worst round): ${[FACADE, ...(baseline ? [BASELINE] : [])].map(loopLine).join('; ')} (goal at 200 req/s: max ≤ 10 ms)`,
  );
  if (baseline) {
    const old = summary[BASELINE];
    ratios.push(
      `- against ${BASELINE}, side by side: throughput **${fmt(dg.rps / old.rps, 2)}×** (${thousands(dg.rps)} vs ${thousands(old.rps)} req/s), CPU per read ${fmt(cpuPerRead(FACADE), 0)} vs ${fmt(cpuPerRead(BASELINE), 0)} µs, added p99 @200/s ${fmt(addedP99, 2)} vs ${fmt(old.fixedP99 - direct.fixedP99, 2)} ms`,
    );
  }
  const body = [
    `${rounds} round(s) of ${duration} s per contender at 32 connections (max throughput; a 1 s warm-up before each), then ${duration} s at a fixed 200 req/s (open loop, microsecond clock; a 1 s warm-up at the rate before each); medians of the rounds, the contenders alternating within each round. CPU is each process's share of one core during the max-throughput runs (the machine has ${os.cpus().length} cores, 100 % each); "not ours" is what the rest of the machine used meanwhile. The load (autocannon, then the fixed-rate client) runs in a process of its own; every contender and the fixed upstream run in processes of their own; the orchestrator idles while they run.`,
    '',
    table(
      [
        'contender',
        'req/s',
        'p50 ms',
        'p99 ms',
        'added p50 @200/s',
        'added p99 @200/s',
        'errors',
        'CPU % at max: contender / upstream / load / not ours',
      ],
      rows,
    ),
    '',
    ...ratios,
  ].join('\n');
  writeSection('single-read', 'Single read', body, { command, quick, goals });

  await Promise.all([upstream.stop(), proxy.stop(), facade.stop(), baseline?.stop(), mesh?.stop()]);
  return summary;
}

// Single read: delivery(uid) selecting about 25 fields, against a fixed-response
// upstream, for four contenders run alternately in one session: direct GET (the
// ceiling), a plain undici reverse proxy (the limit for a Node proxy),
// delivery-graph, and GraphQL Mesh on Hive Gateway (what a user would pick instead).
import { startFacade, startMeshContender, startReverseProxy, startUpstream } from '../lib/contenders.mjs';
import { PLATFORM_ID } from '../lib/fixed-upstream.mjs';
import { fixedRate, load, median } from '../lib/load.mjs';
import { fmt, table, writeSection } from '../lib/report.mjs';
import { MESH_SINGLE_READ } from '../mesh/queries.mjs';

export const KEY = 'sk_bench_merchant';
const UID = '3f1c6b2e-8a4d-4c61-9a0e-5d2b7c9e1f00';

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

export async function singleRead({ quick, command }) {
  const duration = quick ? 3 : 10;
  const rounds = quick ? 1 : 3;
  const upstream = await startUpstream();
  const proxy = await startReverseProxy(upstream.origin);
  const facade = await startFacade(upstream.url);
  const mesh = await startMeshContender(upstream.url).catch((error) => {
    console.error(`Mesh did not start: ${error.message}`);
    return undefined;
  });
  const auth = { authorization: `Bearer ${KEY}` };
  const json = { 'content-type': 'application/json', ...auth };
  const path = `/api/v1/${PLATFORM_ID}/deliveries/${UID}`;
  const contenders = [
    { name: 'direct GET (ceiling)', url: `${upstream.origin}${path}`, headers: auth },
    { name: 'undici reverse proxy', url: `${proxy.origin}${path}`, headers: auth },
    { name: 'delivery-graph', url: `${facade.origin}/graphql`, method: 'POST', headers: json, body: JSON.stringify({ query: FACADE_SINGLE_READ, variables: { uid: UID } }) },
    ...(mesh ? [{ name: 'Mesh + Hive Gateway', url: `${mesh.origin}/graphql`, method: 'POST', headers: json, body: JSON.stringify({ query: MESH_SINGLE_READ, variables: { uid: UID, platform: PLATFORM_ID } }) }] : []),
  ];

  // Each contender answers correctly before it is measured.
  for (const c of contenders) {
    const response = await fetch(c.url, { method: c.method ?? 'GET', headers: c.headers, body: c.body });
    const text = await response.text();
    if (!response.ok || text.includes('"errors"')) throw new Error(`${c.name} answered ${response.status}: ${text.slice(0, 300)}`);
  }

  const results = Object.fromEntries(contenders.map((c) => [c.name, { max: [], fixed: [] }]));
  for (let round = 0; round < rounds; round += 1) {
    for (const c of contenders) {
      await load({ ...c, connections: 32, duration: 1 }); // warm-up
      results[c.name].max.push(await load({ ...c, connections: 32, duration }));
    }
    for (const c of contenders) results[c.name].fixed.push(await fixedRate({ ...c, rate: 200, duration }));
  }
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
      },
    ]),
  );
  const direct = summary['direct GET (ceiling)'];
  const rows = Object.entries(summary).map(([name, s]) => [
    name,
    fmt(s.rps, 0),
    fmt(s.p50, 0),
    fmt(s.p99, 0),
    fmt(s.fixedP50 - direct.fixedP50, 2),
    fmt(s.fixedP99 - direct.fixedP99, 2),
    String(s.errors),
  ]);
  const dg = summary['delivery-graph'];
  const ratios = [
    `- delivery-graph / reverse proxy throughput: **${fmt(dg.rps / summary['undici reverse proxy'].rps, 2)}×** (goal ≥ 0.7×)`,
    mesh ? `- delivery-graph / Mesh throughput: **${fmt(dg.rps / summary['Mesh + Hive Gateway'].rps, 2)}×** (goal ≥ 3×)` : '- Mesh: did not start in this run',
    `- added latency at 200 req/s over the direct GET: p50 **${fmt(dg.fixedP50 - direct.fixedP50, 2)} ms** (goal ≤ 1), p99 **${fmt(dg.fixedP99 - direct.fixedP99, 2)} ms** (goal ≤ 5)`,
  ];
  const body = [
    `${rounds} round(s) of ${duration} s per contender at 32 connections (max throughput), then ${duration} s at a fixed 200 req/s (open loop, microsecond clock); medians of the rounds. autocannon runs in the orchestrating process; every contender and the fixed upstream run in processes of their own.`,
    '',
    table(['contender', 'req/s', 'p50 ms', 'p99 ms', 'added p50 @200/s', 'added p99 @200/s', 'errors'], rows),
    '',
    ...ratios,
  ].join('\n');
  writeSection('single-read', 'Single read', body, { command, quick });

  await Promise.all([upstream.stop(), proxy.stop(), facade.stop(), mesh?.stop()]);
  return summary;
}

// Batch read: deliveries(uids:) of 100 uids (50 distinct) against an upstream
// that takes 20 ms per read: wall time and upstream requests per GraphQL request.
// The requests come from a process of its own.
import { startFacade, startMeshContender, startUpstream } from '../lib/contenders.mjs';
import { PLATFORM_ID } from '../lib/fixed-upstream.mjs';
import { describeLoopDelay, loopDelayWindow } from '../lib/loop-delay.mjs';
import { fmt, table, writeSection } from '../lib/report.mjs';
import { forkWorker } from '../lib/worker.mjs';
import { meshBatchQuery } from '../mesh/queries.mjs';
import { KEY } from './single-read.mjs';

const LATENCY_MS = 20;
const distinct = Array.from({ length: 50 }, (_, i) => `00000000-0000-4000-8000-${String(i).padStart(12, '0')}`);
const UIDS = [...distinct, ...distinct].sort((a, b) => (a.slice(-3) + a < b.slice(-3) + b ? -1 : 1));

const measure = (http, url, body, upstream, iterations) =>
  http.call('sequential', {
    url,
    headers: { 'content-type': 'application/json', authorization: `Bearer ${KEY}` },
    body,
    iterations,
    upstreamOrigin: upstream.origin,
  });

export async function batchRead({ quick, command }) {
  const iterations = quick ? 5 : 50;
  const upstream = await startUpstream(LATENCY_MS);
  const facade = await startFacade(upstream.url, { label: 'batch-read' });
  const mesh = await startMeshContender(upstream.url).catch(() => undefined);
  const http = forkWorker('http-load');
  const rows = [];
  const loop = await loopDelayWindow([{ name: 'facade', origin: facade.origin }]);
  const dg = await measure(
    http,
    `${facade.origin}/graphql`,
    JSON.stringify({
      query: 'query($uids: [ID!]!) { deliveries(uids: $uids) { uid status price { amount } } }',
      variables: { uids: UIDS },
    }),
    upstream,
    iterations,
  );
  const loopDelay = (await loop.stop()).facade;
  rows.push([
    'delivery-graph `deliveries(uids:)`',
    fmt(dg.wall, 1),
    fmt(dg.wallP99, 1),
    fmt(dg.wall / LATENCY_MS, 2),
    String(dg.requests),
  ]);
  if (mesh) {
    const m = await measure(
      http,
      `${mesh.origin}/graphql`,
      JSON.stringify({ query: meshBatchQuery(UIDS, PLATFORM_ID) }),
      upstream,
      iterations,
    );
    rows.push([
      'Mesh, 100 aliased `platformGetDelivery`',
      fmt(m.wall, 1),
      fmt(m.wallP99, 1),
      fmt(m.wall / LATENCY_MS, 2),
      String(m.requests),
    ]);
  }
  await http.stop();
  const body = [
    `100 uids, 50 distinct, upstream answering each read after ${LATENCY_MS} ms; ${iterations} sequential requests, median wall time. Goal: wall ≤ 3 × ${LATENCY_MS} ms with exactly one upstream request per distinct uid (50).`,
    '',
    table(['contender', 'wall ms (median)', 'wall ms (p99)', '× upstream latency', 'upstream requests'], rows),
    '',
    `delivery-graph's event-loop delay over its ${iterations} requests (from its /metrics): ${describeLoopDelay(loopDelay)}.`,
  ].join('\n');
  writeSection('batch-read', 'Batch read', body, { command, quick });
  await Promise.all([upstream.stop(), facade.stop(), mesh?.stop()]);
}

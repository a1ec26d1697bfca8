// Where a read's garbage is allocated: the built facade started in this process,
// V8's sampling heap profiler on (objects collected by minor and major GCs kept
// in the samples), the single read at 32 connections from a worker process.
// Prints the bytes per read allocated under each of our modules and the heaviest
// allocating functions. Usage: npm run build && node bench/probes/allocation-sites.mjs [--seconds=5]
import { Session } from 'node:inspector/promises';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { startUpstream } from '../lib/contenders.mjs';
import { PLATFORM_ID } from '../lib/fixed-upstream.mjs';
import { ROOT } from '../lib/proc.mjs';
import { forkWorker } from '../lib/worker.mjs';
import { facadeReadLoad, probeFlags } from '../scenarios/single-read.mjs';

const flags = probeFlags();
const seconds = Number(flags.seconds ?? 5);
const upstream = await startUpstream();
const { startApp } = await import(path.join(ROOT, 'dist/app.js'));
const { loadConfig } = await import(path.join(ROOT, 'dist/config.js'));
const app = await startApp(
  loadConfig({
    PORT: '0',
    UPSTREAM_URL: upstream.url,
    PLATFORM_ID,
    DATA_DIR: mkdtempSync(path.join(tmpdir(), 'dg-bench-')),
    LOG_LEVEL: 'silent',
    NODE_ENV: 'production',
    WEBHOOKS: 'off',
    RATE_LIMIT_PER_MINUTE: '0',
    UPSTREAM_READ_SCOPE: 'key',
  }),
);
const http = forkWorker('http-load');
const request = facadeReadLoad(app.url);
await http.call('autocannon', { ...request, duration: 2 });
const session = new Session();
session.connect();
await session.post('HeapProfiler.enable');
await session.post('HeapProfiler.startSampling', {
  samplingInterval: 1024,
  includeObjectsCollectedByMinorGC: true,
  includeObjectsCollectedByMajorGC: true,
});
const run = await http.call('autocannon', { ...request, duration: seconds });
const { profile } = await session.post('HeapProfiler.stopSampling');
session.disconnect();
const reads = run.rps * seconds;

const byModule = new Map();
const byFunction = new Map();
let total = 0;
const owner = (url) => {
  if (url.includes('/dist/')) return 'dist/' + url.split('/dist/')[1];
  if (url.includes('node_modules/')) return 'nm/' + url.split('node_modules/').pop().split('/')[0];
  return url
    ? 'node:' +
        url
          .replace(/^node:/, '')
          .split('/')
          .slice(-1)[0]
    : '(native)';
};
const walk = (node, nearest) => {
  const url = node.callFrame.url;
  const here = url.includes('/dist/') || url.includes('node_modules/') ? owner(url) : nearest;
  const self = node.selfSize;
  total += self;
  byModule.set(here ?? owner(url), (byModule.get(here ?? owner(url)) ?? 0) + self);
  const fn = `${node.callFrame.functionName || '(anon)'} ${owner(url)}:${node.callFrame.lineNumber}`;
  byFunction.set(fn, (byFunction.get(fn) ?? 0) + self);
  for (const child of node.children) walk(child, here);
};
walk(profile.head, undefined);
const kb = (bytes) => (bytes / reads / 1024).toFixed(2);
console.log(`${Math.round(run.rps)} req/s; sampled ${kb(total)} KB allocated per read`);
console.log('\nby module (nearest project or package frame):');
for (const [name, bytes] of [...byModule].sort((a, b) => b[1] - a[1]).slice(0, 25))
  console.log(`${kb(bytes).padStart(7)} KB  ${name}`);
console.log('\nby allocating function:');
for (const [name, bytes] of [...byFunction].sort((a, b) => b[1] - a[1]).slice(0, 30))
  console.log(`${kb(bytes).padStart(7)} KB  ${name}`);
await http.stop();
await app.stop();
await upstream.stop();
process.exit(0);

// Where a single read's CPU goes, by layer, for the bare undici reverse proxy and the facade (and another checkout's
// facade with --baseline), one after the other against the same fixed upstream, alternating in rounds: each runs with
// --perf-basic-prof, is warmed up, then `perf record -e cpu-clock:u` samples it while it serves a fixed number of reads
// (32 connections, a fresh uid per read). cpu-clock counts CPU time, not wall time: a thread waiting for a core is not
// sampled, which V8's own profiler (wall clock) does not tell apart (it showed `writev` at a fifth of the facade's time
// on a loaded machine, where the kernel's whole share is a tenth). Only user space is sampled (perf_event_paranoid 2);
// the system time is read from /proc. Each sample's main-thread stack is given to its nearest layer: garbage collection
// and V8's JSON natives first, else the nearest JavaScript frame's module (graphql-jit's generated code, a package, a
// file of dist/, a part of Node), else the native code that runs it (event loop, HTTP parser). Usage: npm run build &&
// node bench/probes/read-layers.mjs [--reads=20000] [--rounds=3] [--baseline=<checkout>[,<checkout>...]] [--top=40]
// [--env=NAME=VALUE[;NAME=VALUE...]]. Each --baseline is a built checkout (bench/variants/build.mjs makes one with a
// mechanism swapped for the library's way); --env adds this checkout run with those variables, one contender each.
import { execFileSync, spawn, spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { startFacade, startReverseProxy, startUpstream } from '../lib/contenders.mjs';
import { PLATFORM_ID } from '../lib/fixed-upstream.mjs';
import { UID_SLOT } from '../lib/load.mjs';
import { forkWorker } from '../lib/worker.mjs';
import { facadeReadLoad, KEY, probeFlags } from '../scenarios/single-read.mjs';

const flags = probeFlags();
const reads = Number(flags.reads ?? 20_000);
const rounds = Number(flags.rounds ?? 3);
const top = Number(flags.top ?? 40);
const HZ = 4999;
if (spawnSync('perf', ['--version']).status !== 0) {
  console.error('perf is not installed here (linux-perf); nothing to measure with.');
  process.exit(1);
}
const outDir = mkdtempSync(path.join(tmpdir(), 'dg-read-layers-'));

/** User and system CPU time the process has used so far, in µs. */
function cpuOf(pid) {
  const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
  const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  return { user: Number(fields[11]) * 1e4, system: Number(fields[12]) * 1e4 };
}

const GC =
  /Heap::|Scavenger|MarkCompact|GCTracer|ConcurrentMarking|Sweeper|MinorMC|IncrementalMarking|MemoryAllocator|ScavengeJob|PagedSpace|Evacuat|MarkingVisitor|Heap::CollectGarbage/;
const NODE_PARTS = [
  [/^node:(internal\/)?(_http_|http)/, 'Node http (server, request, response)'],
  [/^node:internal\/streams\//, 'Node streams'],
  [/^node:(internal\/)?(net|stream_base_commons)/, 'Node sockets (net)'],
  [/^node:internal\/process\/(task_queues|promises)/, 'microtasks and nextTick'],
  [/^node:(internal\/)?timers/, 'timers'],
  [/^node:events/, 'Node events'],
];

/** The layer of a main-thread stack (leaf first). */
function layerOf(frames) {
  for (const frame of frames) {
    if (GC.test(frame)) return 'garbage collection';
    if (/JsonParser/.test(frame)) return 'JSON.parse';
    if (/JsonStringifier/.test(frame)) return 'JSON.stringify';
    if (!frame.startsWith('JS:')) continue;
    const where = / (\S+)$/.exec(frame)?.[1] ?? '';
    // graphql-jit's compiled operations have no script of their own.
    if (/^:\d+/.test(where) || /^JS:\S*(Resolver|Query|Handler)\S* /.test(frame) || frame.includes('GraphQLError.line'))
      return 'graphql-jit compiled operation';
    if (where.includes('/node_modules/')) {
      const parts = where.split('/node_modules/').pop().split('/');
      return `package ${parts[0].startsWith('@') ? `${parts[0]}/${parts[1]}` : parts[0]}`;
    }
    if (where.includes('/dist/')) return `dist/${where.split('/dist/')[1].replace(/:\d+:\d+$/, '')}`;
    if (where.includes('/bench/lib/')) return 'the proxy itself';
    if (where.startsWith('node:')) return NODE_PARTS.find(([test]) => test.test(where))?.[1] ?? 'Node, other';
    if (/^wasm|^JS:wasm/.test(frame)) continue;
  }
  const native = frames.find((frame) => /^uv_|^uv__|node::|llhttp/.test(frame)) ?? '';
  if (/Parser|llhttp/.test(native)) return 'native: Node HTTP parser';
  if (/uv_|uv__|Stream|LibuvStream/.test(native)) return 'native: event loop and socket I/O';
  return 'native: other (malloc, V8 runtime)';
}

async function profile(name, pid, load, http, round) {
  const warm = await http.call('autocannon', { ...load, amount: round === 0 ? 10_000 : 1_000, duration: 600 });
  if (warm.errors + (warm.non2xx ?? 0) > 0) throw new Error(`${name}: errors in the warm-up`);
  const file = path.join(outDir, `${pid}-${round}.data`);
  const perf = spawn('perf', ['record', '-e', 'cpu-clock:u', '-F', String(HZ), '-g', '-o', file, '-p', String(pid)], {
    stdio: ['ignore', 'ignore', 'pipe'],
  });
  await new Promise((resolve) => setTimeout(resolve, 500));
  const before = cpuOf(pid);
  const run = await http.call('autocannon', { ...load, amount: reads, duration: 600 });
  const after = cpuOf(pid);
  perf.kill('SIGINT');
  await new Promise((resolve) => perf.once('exit', resolve));
  if (run.errors + (run.non2xx ?? 0) > 0) throw new Error(`${name}: ${run.errors} errors, ${run.non2xx} non-2xx`);
  const served = run.requests;
  const text = execFileSync('perf', ['script', '-i', file, '-F', 'pid,tid,ip,sym'], {
    maxBuffer: 1 << 30,
    encoding: 'utf8',
    stdio: ['ignore', 'pipe', 'ignore'],
  });
  const layers = new Map();
  let main = 0;
  let others = 0;
  for (const block of text.split('\n\n')) {
    const lines = block.split('\n').filter(Boolean);
    const ids = /(\d+)\/(\d+)/.exec(lines[0] ?? '');
    if (!ids) continue;
    if (ids[1] !== ids[2]) {
      others += 1;
      continue;
    }
    main += 1;
    const layer = layerOf(lines.slice(1).map((line) => line.trim().replace(/^[0-9a-f]+ /, '')));
    layers.set(layer, (layers.get(layer) ?? 0) + 1);
  }
  return { name, served, user: after.user - before.user, system: after.system - before.system, main, others, layers };
}

/** Rounds of one contender summed: µs per read over all of them. */
function perRead(rounds) {
  const served = rounds.reduce((sum, r) => sum + r.served, 0);
  const us = (samples) => ((samples / HZ) * 1e6) / served;
  const layers = new Map();
  for (const r of rounds)
    for (const [layer, samples] of r.layers) layers.set(layer, (layers.get(layer) ?? 0) + samples);
  const sum = (key) => rounds.reduce((total, r) => total + r[key], 0);
  return {
    name: rounds[0].name,
    user: sum('user') / served,
    system: sum('system') / served,
    main: us(sum('main')),
    others: us(sum('others')),
    layers: new Map([...layers].map(([layer, samples]) => [layer, us(samples)])),
    rounds: rounds.map((r) => (r.user + r.system) / r.served),
  };
}

const upstream = await startUpstream();
const execArgv = ['--perf-basic-prof'];
const proxy = await startReverseProxy(upstream.origin, { execArgv });
const facade = await startFacade(upstream.url, { label: 'read-layers', execArgv });
const baselines = [];
for (const dir of (flags.baseline ?? '')
  .split(',')
  .filter(Boolean)
  .map((each) => path.resolve(each))) {
  const started = await startFacade(upstream.url, {
    label: 'read-layers-baseline',
    entry: path.join(dir, 'dist/main.js'),
    cwd: dir,
    execArgv,
  });
  // A variant's folder is named dg-variant-<name>-<random> (bench/variants/build.mjs).
  baselines.push({ name: /dg-variant-(.+)-\w{6}$/.exec(path.basename(dir))?.[1] ?? path.basename(dir), started });
}
for (const settings of (flags.env ?? '').split(',').filter(Boolean)) {
  const env = Object.fromEntries(settings.split(';').map((pair) => pair.split(/=(.*)/s, 2)));
  baselines.push({
    name: settings,
    started: await startFacade(upstream.url, { label: 'read-layers-env', execArgv, env }),
  });
}
const http = forkWorker('http-load');
process.on('exit', () => {
  const pids = [upstream.child.pid, proxy.child.pid, facade.child.pid, ...baselines.map((b) => b.started.child.pid)];
  for (const pid of [...pids, http.pid]) {
    try {
      if (pid) process.kill(pid, 'SIGKILL');
    } catch {
      // already gone
    }
  }
});
const contenders = [
  {
    name: 'proxy',
    pid: proxy.child.pid,
    load: {
      url: `${proxy.origin}/api/v1/${PLATFORM_ID}/deliveries/${UID_SLOT}`,
      headers: { authorization: `Bearer ${KEY}` },
      uniqueIds: true,
      connections: 32,
    },
  },
  ...baselines.map(({ name, started }) => ({ name, pid: started.child.pid, load: facadeReadLoad(started.origin) })),
  { name: 'delivery-graph', pid: facade.child.pid, load: facadeReadLoad(facade.origin) },
];
// The contenders alternate within each round; each one's rounds are summed.
const measured = contenders.map(() => []);
for (let round = 0; round < rounds; round += 1) {
  for (const [index, c] of contenders.entries())
    measured[index].push(await profile(c.name, c.pid, c.load, http, round));
}
await http.stop();
const results = measured.map(perRead);

const cell = (value) => (value === undefined ? '' : value.toFixed(1));
const names = results.map((r) => r.name);
console.log(
  `${rounds} round(s) of ${reads} reads each, contenders alternating, 32 connections; µs of CPU per read over all rounds (perf cpu-clock:u samples at ${HZ} Hz; user and system from /proc over the same reads)\n`,
);
console.log(`| | ${names.join(' | ')} |`);
console.log(`| --- | ${names.map(() => '---:').join(' | ')} |`);
console.log(
  `| CPU per read, user + system (/proc) | ${results.map((r) => `${cell(r.user + r.system)} (${cell(r.user)} + ${cell(r.system)})`).join(' | ')} |`,
);
console.log(
  `| ratio to the proxy | ${results.map((r) => ((r.user + r.system) / (results[0].user + results[0].system)).toFixed(2) + '×').join(' | ')} |`,
);
console.log(
  `| CPU per read in each round | ${results.map((r) => r.rounds.map((value) => value.toFixed(0)).join(', ')).join(' | ')} |`,
);
console.log(`| sampled in user space: main thread | ${results.map((r) => cell(r.main)).join(' | ')} |`);
console.log(
  `| sampled in user space: other threads (GC helpers, compiler, SQLite writer) | ${results.map((r) => cell(r.others)).join(' | ')} |`,
);
const all = new Map();
for (const r of results) for (const [layer, value] of r.layers) all.set(layer, Math.max(all.get(layer) ?? 0, value));
for (const [layer] of [...all].sort((a, b) => b[1] - a[1]).slice(0, top))
  console.log(`| ${layer} | ${results.map((r) => cell(r.layers.get(layer))).join(' | ')} |`);
process.exit(0);

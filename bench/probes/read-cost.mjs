// The single read's cost per read, counted rather than timed: the bare undici reverse proxy and the facade (and another
// checkout's facade with --baseline) each serve a fixed number of reads (32 connections, a fresh uid per read) after a
// warm-up, alternating within each round; for each, the CPU time its process used per read, user and system apart. With
// --valgrind every contender runs under callgrind, and the count is the instructions its process (every thread) ran per
// read: the same on a busy machine as on a quiet one, but only what runs in user space (a syscall counts its few
// instructions, not the kernel's work, which the system time shows). Under valgrind V8's tiering is not what it is at
// full speed: a window may hold recompilations (the share of instructions in its optimizing compiler is printed per
// round), and then the counts say more about V8's state than about the reads; compare rounds with a small share only.
// Usage: npm run build && node bench/probes/read-cost.mjs [--reads=20000] [--rounds=3] [--baseline=<checkout>]
// [--valgrind]
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readdirSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { startFacade, startReverseProxy, startUpstream } from '../lib/contenders.mjs';
import { PLATFORM_ID } from '../lib/fixed-upstream.mjs';
import { UID_SLOT } from '../lib/load.mjs';
import { forkWorker } from '../lib/worker.mjs';
import { facadeReadLoad, KEY, probeFlags } from '../scenarios/single-read.mjs';

const flags = probeFlags();
const valgrind = 'valgrind' in flags;
const reads = Number(flags.reads ?? (valgrind ? 2_000 : 20_000));
const rounds = Number(flags.rounds ?? (valgrind ? 1 : 3));
const outDir = mkdtempSync(path.join(tmpdir(), 'dg-read-cost-'));
let started = 0;
/** callgrind over every thread, V8's generated code included (it rewrites code it has run). */
const wrap = () =>
  valgrind
    ? [
        'valgrind',
        '--tool=callgrind',
        '--smc-check=all-non-file',
        '--dump-instr=no',
        '--separate-threads=yes',
        `--callgrind-out-file=${outDir}/cg-${(started += 1)}.%p`,
      ]
    : [];
const timeoutMs = valgrind ? 600_000 : undefined;
// Under valgrind V8 compiles and collects on the main thread: background compile jobs would otherwise still be
// running after any warm-up valgrind's pace allows, and their count would swamp the reads'.
// --node-flags="...": Node options for the facades (not the proxy), e.g. a V8 heap setting to try.
// Nor does it drop compiled code it has not run for a few collections (at valgrind's pace that is most of it).
const execArgv = valgrind ? ['--single-threaded', '--no-flush-bytecode'] : [];
const facadeArgv = [...execArgv, ...(flags['node-flags'] ? flags['node-flags'].split(' ') : [])];
/** Seconds a request may take: under valgrind, a cold contender answers 32 connections slowly. */
const timeout = valgrind ? 120 : undefined;

/** User and system CPU time the process has used so far, in µs. */
function cpuOf(pid) {
  const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
  const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  const tick = 1e6 / 100;
  return { user: Number(fields[11]) * tick, system: Number(fields[12]) * tick, faults: Number(fields[7]) };
}

/**
 * The instructions callgrind counted since its counters were last zeroed (it
 * dumps them on request, a file per thread): over every thread, and on the
 * main thread (the first) alone.
 */
function instructionsSinceZero(pid) {
  const before = new Set(readdirSync(outDir));
  execFileSync('callgrind_control', ['-d', String(pid)], { stdio: 'ignore' });
  const dumped = readdirSync(outDir).filter((name) => !before.has(name) && name.includes(`.${pid}`));
  let total = 0;
  let main = 0;
  let compiling = 0;
  for (const name of dumped) {
    const file = path.join(outDir, name);
    const text = readFileSync(file, 'utf8');
    const count = Number(/^(?:totals|summary):\s*(\d+)/m.exec(text)?.[1] ?? 0);
    total += count;
    if (/^thread:\s*1$/m.test(text)) main += count;
    if (count === 0) continue;
    // What V8's optimizing compiler ran in the window (inclusive): tiering, not reads.
    const annotated = execFileSync('callgrind_annotate', ['--inclusive=yes', '--threshold=100', file], {
      encoding: 'utf8',
      maxBuffer: 1 << 28,
    });
    const line = annotated.split('\n').find((each) => each.includes('v8::internal::Compiler::CompileOptimized('));
    compiling += Number(line?.trim().split(/\s/)[0].replaceAll(',', '') ?? 0);
  }
  return { total, main, compiling };
}

// Under valgrind a contender may leave a connection idle for seconds: the upstream keeps it open meanwhile.
const upstream = await startUpstream(0, { keepAliveMs: valgrind ? 600_000 : undefined });
const proxy = await startReverseProxy(upstream.origin, { wrap: wrap(), timeoutMs, execArgv });
const facade = await startFacade(upstream.url, { label: 'read-cost', wrap: wrap(), timeoutMs, execArgv: facadeArgv });
const baselineDir = flags.baseline && path.resolve(flags.baseline);
const baseline = baselineDir
  ? await startFacade(upstream.url, {
      label: 'read-cost-baseline',
      entry: path.join(baselineDir, 'dist/main.js'),
      cwd: baselineDir,
      wrap: wrap(),
      timeoutMs,
      execArgv: facadeArgv,
    })
  : undefined;
const http = forkWorker('http-load');
// A failed run leaves nothing behind (a contender under valgrind would run on for hours).
process.on('exit', () => {
  for (const pid of [upstream.child.pid, proxy.child.pid, facade.child.pid, baseline?.child.pid, http.pid]) {
    try {
      if (pid) process.kill(pid, 'SIGKILL');
    } catch {
      // already gone
    }
  }
});
const proxyLoad = {
  url: `${proxy.origin}/api/v1/${PLATFORM_ID}/deliveries/${UID_SLOT}`,
  headers: { authorization: `Bearer ${KEY}` },
  uniqueIds: true,
  connections: 32,
};
const contenders = [
  { name: 'undici reverse proxy', pid: proxy.child.pid, load: proxyLoad },
  { name: 'delivery-graph', pid: facade.child.pid, load: facadeReadLoad(facade.origin) },
  ...(baseline
    ? [
        {
          name: `delivery-graph at ${path.basename(baselineDir)}`,
          pid: baseline.child.pid,
          load: facadeReadLoad(baseline.origin),
        },
      ]
    : []),
];
const perRead = ({ total, main, compiling }, served) => ({
  instructions: total / served,
  mainInstructions: main / served,
  compiling: compiling / total,
});
const measured = new Map(contenders.map((c) => [c.name, []]));
for (let round = 0; round < rounds; round += 1) {
  for (const c of contenders) {
    // Warm-up: the JIT, the pools' connections, the facade's compiled plan.
    const warmReads = Number(flags.warm ?? (valgrind ? 1_000 : 5_000));
    // After the first round the JIT is warm: a short run reopens the connections.
    const warm = await http.call('autocannon', {
      ...c.load,
      amount: round === 0 ? warmReads : Math.min(warmReads, 500),
      duration: 600,
      timeout,
    });
    // A cold contender under valgrind may time out a few (the upstream's idle connections close meanwhile): only the
    // measured reads must all succeed.
    if (warm.errors + (warm.non2xx ?? 0) > 0)
      console.error(`${c.name}: ${warm.errors} errors, ${warm.non2xx} non-2xx in the warm-up`);
    if (valgrind) execFileSync('callgrind_control', ['-z', String(c.pid)], { stdio: 'ignore' });
    const before = cpuOf(c.pid);
    const run = await http.call('autocannon', { ...c.load, amount: reads, duration: 600, timeout });
    const after = cpuOf(c.pid);
    const served = run.requests;
    if (run.errors + (run.non2xx ?? 0) > 0) throw new Error(`${c.name}: ${run.errors} errors, ${run.non2xx} non-2xx`);
    measured.get(c.name).push({
      user: (after.user - before.user) / served,
      system: (after.system - before.system) / served,
      faults: (after.faults - before.faults) / served,
      ...(valgrind ? perRead(instructionsSinceZero(c.pid), served) : {}),
      rps: run.rps,
    });
  }
}
await http.stop();
for (const p of [proxy, facade, baseline]) await p?.stop();
upstream.child.kill();

const median = (values) => [...values].sort((a, b) => a - b)[Math.floor(values.length / 2)];
const proxyCpu = median(measured.get(contenders[0].name).map((m) => m.user + m.system));
const proxyIr = valgrind ? median(measured.get(contenders[0].name).map((m) => m.instructions)) : undefined;
const proxyMainIr = valgrind ? median(measured.get(contenders[0].name).map((m) => m.mainInstructions)) : undefined;
console.log(
  `${reads} reads per round, ${rounds} round(s)${valgrind ? ", under callgrind (CPU times are valgrind's, read the instructions)" : ''}; medians, then each round`,
);
for (const [name, runs] of measured) {
  const cpu = median(runs.map((m) => m.user + m.system));
  const line = [
    `${name.padEnd(34)} CPU ${cpu.toFixed(0).padStart(4)} µs/read (user ${median(runs.map((m) => m.user)).toFixed(0)}, system ${median(runs.map((m) => m.system)).toFixed(0)}; ${median(runs.map((m) => m.faults)).toFixed(2)} page faults) = ${(cpu / proxyCpu).toFixed(2)}× the proxy`,
  ];
  if (valgrind) {
    const ir = median(runs.map((m) => m.instructions));
    const mainIr = median(runs.map((m) => m.mainInstructions));
    line.push(
      `  ${(ir / 1e3).toFixed(0)} k instructions/read = ${(ir / proxyIr).toFixed(2)}× the proxy (main thread ${(mainIr / 1e3).toFixed(0)} k = ${(mainIr / proxyMainIr).toFixed(2)}×)`,
    );
  }
  line.push(
    `  rounds: ${runs.map((m) => (m.user + m.system).toFixed(0)).join(', ')} µs; ${runs.map((m) => Math.round(m.rps)).join(', ')} req/s`,
  );
  if (valgrind)
    line.push(
      `; instructions per round ${runs.map((m) => `${(m.instructions / 1e3).toFixed(0)} k (${(100 * m.compiling).toFixed(0)} % compiling)`).join(', ')}`,
    );
  console.log(line.join(''));
}
process.exit(0);

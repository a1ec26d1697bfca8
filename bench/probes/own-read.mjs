// What a read of a delivery the facade already knows costs, by thread: the fixed upstream, this checkout's facade and
// each --baseline checkout's, side by side in alternating rounds. Each round first reads --uids fresh uids (their owners
// are recorded: a key-scoped upstream's 200 proves them), then reads the same uids again at 32 connections for
// --seconds, and reports req/s and the CPU per read of every thread of the facade's process (main, SQLite writer, libuv
// pool, V8's helpers). Reads of one's own deliveries are the common case of a frontend; the single-read scenario's
// fresh uids are not. With --uids=0 there is no first pass and the uids count from 1 in each run, as in that scenario
// (its first run reads fresh uids, the later ones read them again). Usage: npm run build && node bench/probes/own-read.mjs [--uids=20000] [--seconds=8] [--rounds=3]
// [--idle=<seconds before each measured run>] [--baseline=<checkout>[,<checkout>...]] [--env=NAME=VALUE[;NAME=VALUE...]]
import { readdirSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { startFacade, startUpstream } from '../lib/contenders.mjs';
import { forkWorker } from '../lib/worker.mjs';
import { median } from '../lib/stats.mjs';
import { facadeReadLoad, probeFlags } from '../scenarios/single-read.mjs';

const flags = probeFlags();
const uids = Number(flags.uids ?? 20_000);
const seconds = Number(flags.seconds ?? 8);
const rounds = Number(flags.rounds ?? 3);
const idle = Number(flags.idle ?? 0);

/** CPU time (µs) of each thread of `pid`, summed by thread name. */
function threadsOf(pid) {
  const byName = {};
  for (const tid of readdirSync(`/proc/${pid}/task`)) {
    let stat;
    try {
      stat = readFileSync(`/proc/${pid}/task/${tid}/stat`, 'utf8');
    } catch {
      continue; // ended meanwhile
    }
    const name = stat.slice(stat.indexOf('(') + 1, stat.lastIndexOf(')'));
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    const group = tid === String(pid) ? 'main' : name.replace(/\d+$/, '#');
    byName[group] = (byName[group] ?? 0) + (Number(fields[11]) + Number(fields[12])) * 1e4;
  }
  return byName;
}

const upstream = await startUpstream();
const contenders = [{ name: 'this checkout' }];
for (const dir of flags.baseline ? flags.baseline.split(',') : [])
  contenders.push({
    name: path.basename(path.resolve(dir)),
    entry: path.join(path.resolve(dir), 'dist/main.js'),
    cwd: path.resolve(dir),
  });
for (const set of flags.env ? [flags.env] : [])
  contenders.push({
    name: `this checkout, ${set}`,
    env: Object.fromEntries(set.split(';').map((kv) => kv.split(/=(.*)/s, 2))),
  });
for (const c of contenders)
  c.facade = await startFacade(upstream.url, { label: 'own-read', entry: c.entry, cwd: c.cwd, env: c.env });
const http = forkWorker('http-load');
const results = new Map(contenders.map((c) => [c.name, []]));
for (let round = 1; round <= rounds; round += 1) {
  for (const c of contenders) {
    const request = facadeReadLoad(c.facade.origin);
    // The same uids each round (the load numbers them from 1): the first pass records them, later ones read them again.
    if (uids > 0) await http.call('autocannon', { ...request, amount: uids });
    else await http.call('autocannon', { ...request, duration: 1 });
    if (idle) await new Promise((resolve) => setTimeout(resolve, idle * 1000));
    await fetch(`${upstream.origin}/__reset`);
    const before = threadsOf(c.facade.child.pid);
    const result = await http.call('autocannon', { ...request, duration: seconds, uidLimit: uids || undefined });
    const after = threadsOf(c.facade.child.pid);
    const { count } = await (await fetch(`${upstream.origin}/__count`)).json();
    const perRead = {};
    for (const [name, us] of Object.entries(after)) perRead[name] = (us - (before[name] ?? 0)) / result.requests;
    results.get(c.name).push({
      rps: result.rps,
      perRead,
      gets: count / result.requests,
      errors: result.errors + (result.non2xx ?? 0),
    });
  }
}
const names = [...new Set([...results.values()].flat().flatMap((r) => Object.keys(r.perRead)))].sort();
console.log(
  `| contender | req/s | µs per read, all threads | ${names.join(' | ')} | upstream GETs per read | errors |`,
);
console.log(`| --- | --- | --- | ${names.map(() => '---').join(' | ')} | --- | --- |`);
for (const [name, runs] of results) {
  const total = median(runs.map((r) => Object.values(r.perRead).reduce((a, b) => a + b, 0)));
  const cells = names.map((n) => median(runs.map((r) => r.perRead[n] ?? 0)).toFixed(1));
  console.log(
    `| ${name} | ${Math.round(median(runs.map((r) => r.rps)))} | ${total.toFixed(1)} | ${cells.join(' | ')} | ${median(runs.map((r) => r.gets)).toFixed(3)} | ${runs.reduce((a, r) => a + r.errors, 0)} |`,
  );
}
await http.stop();
for (const c of contenders) await c.facade.stop();
upstream.child.kill();
process.exit(0);

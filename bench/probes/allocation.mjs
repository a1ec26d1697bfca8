// Garbage per read (issue 22, item 6): the facade under --trace-gc serving the
// single read at 32 connections, fresh uid each; every young-generation
// collection (Scavenge) line gives the young heap before and after it, so the
// bytes a read leaves behind are the sum of (before - after) over the reads, and
// the share of time the scavenges took is their summed pause over the run.
// --baseline=<checkout> runs that checkout's build too, alternating, in one run.
// Usage: npm run build && node bench/probes/allocation.mjs [--seconds=10] [--rounds=2] [--baseline=/path/to/checkout]
import { spawn } from 'node:child_process';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { startUpstream } from '../lib/contenders.mjs';
import { PLATFORM_ID } from '../lib/fixed-upstream.mjs';
import { ROOT, stop } from '../lib/proc.mjs';
import { forkWorker } from '../lib/worker.mjs';
import { facadeReadLoad, probeFlags } from '../scenarios/single-read.mjs';

const flags = probeFlags();
const seconds = Number(flags.seconds ?? 10);
const rounds = Number(flags.rounds ?? 2);

function startTraced(upstreamUrl, checkout) {
  const child = spawn(process.execPath, ['--trace-gc', path.join(checkout, 'dist/main.js')], {
    cwd: checkout,
    env: {
      ...process.env,
      PORT: '0',
      UPSTREAM_URL: upstreamUrl,
      PLATFORM_ID,
      DATA_DIR: mkdtempSync(path.join(tmpdir(), 'dg-bench-')),
      LOG_LEVEL: 'silent',
      NODE_ENV: 'production',
      WEBHOOKS: 'off',
      RATE_LIMIT_PER_MINUTE: '0',
      UPSTREAM_READ_SCOPE: 'key',
      LOG_FORMAT: 'pretty',
    },
    // pretty: the banner stays on stdout beside --trace-gc's lines (with JSON logs it goes to stderr).
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  let output = '';
  child.stdout.on('data', (chunk) => (output += chunk.toString()));
  return new Promise((resolve, reject) => {
    const timer = setInterval(() => {
      const served = /serving on (http:\/\/\S+)/.exec(output);
      if (!served) return;
      clearInterval(timer);
      resolve({ child, origin: served[1], mark: () => output.length, since: (mark) => output.slice(mark) });
    }, 50);
    child.once('exit', (code) => reject(new Error(`exited with ${code}:\n${output}`)));
  });
}

/** Young-generation collections in a slice of --trace-gc output: bytes freed and pause. */
function scavenges(text) {
  let freedMb = 0;
  let pauseMs = 0;
  let count = 0;
  for (const match of text.matchAll(
    /Scavenge(?: \(interleaved\))? ([\d.]+) \([\d.]+\) -> ([\d.]+) \([\d.]+\) MB, (?:pooled: [\d.]+ MB, )?([\d.]+) \/ [\d.]+ ms/g,
  )) {
    freedMb += Number(match[1]) - Number(match[2]);
    pauseMs += Number(match[3]);
    count += 1;
  }
  return { freedMb, pauseMs, count };
}

const upstream = await startUpstream();
const contenders = [{ name: 'this checkout', checkout: ROOT }];
if (flags.baseline)
  contenders.push({ name: path.basename(path.resolve(flags.baseline)), checkout: path.resolve(flags.baseline) });
for (const c of contenders) c.facade = await startTraced(upstream.url, c.checkout);
const http = forkWorker('http-load');
const request = (c) => facadeReadLoad(c.facade.origin);
const results = Object.fromEntries(contenders.map((c) => [c.name, []]));
for (let round = 0; round < rounds; round += 1) {
  for (const c of contenders) {
    await http.call('autocannon', { ...request(c), duration: 2 });
    const mark = c.facade.mark();
    const started = performance.now();
    const run = await http.call('autocannon', { ...request(c), duration: seconds });
    const wallMs = performance.now() - started;
    const reads = run.rps * seconds;
    const gc = scavenges(c.facade.since(mark));
    results[c.name].push({
      kbPerRead: (gc.freedMb * 1024) / reads,
      gcShare: gc.pauseMs / wallMs,
      scavenges: gc.count,
      rps: run.rps,
    });
    console.log(
      `${c.name}, round ${round + 1}: ${Math.round(run.rps)} req/s, ${((gc.freedMb * 1024 * 1024) / reads / 1024).toFixed(1)} KB of young garbage per read, ${gc.count} scavenges, ${((100 * gc.pauseMs) / wallMs).toFixed(1)} % of the run in them`,
    );
  }
}
await http.stop();
for (const c of contenders) await stop(c.facade.child);
await upstream.stop();
const median = (values) => values.slice().sort((x, y) => x - y)[Math.floor(values.length / 2)];
for (const [name, list] of Object.entries(results)) {
  console.log(
    `${name}: median ${median(list.map((r) => r.kbPerRead)).toFixed(1)} KB per read, scavenges ${(100 * median(list.map((r) => r.gcShare))).toFixed(1)} % of the time`,
  );
}
process.exit(0);

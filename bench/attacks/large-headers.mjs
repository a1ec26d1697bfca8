// Large headers held open (issue 20): an attacker opens many connections to one
// path and trickles a large header block into each (by default 200 KiB in 8 KiB
// lines, one line every 200 ms per connection), never finishing it, while a
// prober (a process of its own) keeps asking GET /health on fresh connections. The connections open 100
// every 50 ms (a burst of thousands would overflow the listen backlog and time
// the kernel's SYN retries instead of the server). Starts its own facade
// (embedded sandbox, SQLite) and prints the facade's RSS before, at its peak
// during, at the end of and after the attack (--after seconds, 5 by default,
// after the attacker left),
// what became of the attacker's connections, and the prober's answers and
// latency during the attack. With headers under the server's limit (e.g.
// --header-kib 12) every connection is held until the headers deadline, which
// measures what one idle connection costs. --webhook-port starts the facade with
// WEBHOOK_PORT (webhooks on a port of their own, the main port at Node's 16 KiB);
// by default webhooks share the main port, whose parser then takes webhook-sized
// heads.
//
//   node bench/attacks/large-headers.mjs [--connections 3000] [--header-kib 200] [--trickle-ms 200]
//                                        [--path /graphql] [--seconds 15] [--after 5] [--webhook-port]
//                                        [--dist] [--root <checkout>]
//
// --dist runs the compiled dist/main.js (npm run build first); by default the
// sources run through tsx. --root runs another checkout's facade (e.g. a
// worktree of an older commit, built there) with this script. Traffic stays on
// 127.0.0.1; the attack ends after --seconds, the whole run within a minute.
import { mkdtempSync, rmSync } from 'node:fs';
import { connect } from 'node:net';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { parseArgs } from 'node:util';
import { cpuMs } from '../lib/cpu.mjs';
import { ROOT, sleep, spawnReady } from '../lib/proc.mjs';
import { forkWorker } from '../lib/worker.mjs';

const { values: options } = parseArgs({
  options: {
    connections: { type: 'string', default: '3000' },
    'header-kib': { type: 'string', default: '200' },
    path: { type: 'string', default: '/graphql' },
    'trickle-ms': { type: 'string', default: '200' },
    seconds: { type: 'string', default: '15' },
    after: { type: 'string', default: '5' },
    'webhook-port': { type: 'boolean', default: false },
    dist: { type: 'boolean', default: false },
    root: { type: 'string', default: ROOT },
  },
});
const CONNECTIONS = Number(options.connections);
const HEADER_BYTES = Number(options['header-kib']) * 1024;
const SECONDS = Number(options.seconds);
const LINE_BYTES = 8 * 1024;
const TRICKLE_MS = Number(options['trickle-ms']);
const SAMPLE_MS = 200;
const root = path.resolve(options.root);

function percentile(sorted, p) {
  return sorted.length === 0 ? NaN : sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))];
}
const mib = (kb) => Math.round(kb / 1024);

const dataDir = mkdtempSync(path.join(tmpdir(), 'dg-attack-'));
const entry = options.dist ? [path.join(root, 'dist/main.js')] : ['--import', 'tsx', path.join(root, 'src/main.ts')];
const facade = await spawnReady(process.execPath, entry, {
  cwd: root,
  // Every attacker connection comes from 127.0.0.1: this measures the deadlines, the cap per address has a scenario of
  // its own (connection-caps).
  env: {
    PORT: '0',
    DATA_DIR: dataDir,
    LOG_LEVEL: 'silent',
    SANDBOX_PORT: '0',
    UPSTREAM_URL: '',
    MAX_CONNECTIONS_PER_ADDRESS: '0',
    ...(options['webhook-port'] ? { WEBHOOK_PORT: '0' } : {}),
  },
  ready: /serving on (http:\/\/\S+)/,
  timeoutMs: 120_000,
});
const origin = facade.match[1];
const { port } = new URL(origin);

// Warm-up, then the baseline.
for (let i = 0; i < 20; i += 1) await (await fetch(`${origin}/health`)).text();
await sleep(1_000);
const baselineKb = facade.rssKb();
const cpuBefore = cpuMs(facade.child.pid);
const attackStarted = performance.now();

// RSS samples through the attack.
let peakKb = baselineKb;
let open = 0;
// The sample with the most attacker connections open (the later one on a tie: their headers have grown since).
let mostOpen = { open: 0, rssKb: baselineKb };
const sampler = setInterval(() => {
  const rss = facade.rssKb();
  peakKb = Math.max(peakKb, rss);
  if (open > 0 && open >= mostOpen.open) mostOpen = { open, rssKb: rss };
}, SAMPLE_MS);

// The prober, from the start of the attack to its end.
const prober = forkWorker('health-prober');
const probing = prober.call('probe', { url: `${origin}/health`, seconds: SECONDS });

// The attacker: each connection sends its request line, then one header line every TRICKLE_MS, never the blank line
// that ends them.
const answers = new Map();
const closedLived = [];
let leaving = false;
let opened = 0;
let sentBytes = 0;
const sockets = [];
/** Header line `i`, `bytes` long with its name and line end. */
const headerLine = (i, bytes) => `x-padding-${i}: ${'p'.repeat(Math.max(1, bytes - 14 - String(i).length))}\r\n`;
for (let i = 0; i < CONNECTIONS; i += 1) {
  const socket = connect(Number(port), '127.0.0.1');
  let answered = false;
  let openedAt = 0;
  socket.on('error', () => undefined);
  socket.on('data', (chunk) => {
    if (answered) return;
    answered = true;
    const status = /^HTTP\/1\.1 (\d{3})/.exec(chunk.toString('latin1'))?.[1] ?? 'other';
    answers.set(status, (answers.get(status) ?? 0) + 1);
  });
  socket.on('connect', () => {
    opened += 1;
    open += 1;
    openedAt = performance.now();
    socket.write(`POST ${options.path} HTTP/1.1\r\nhost: attacker\r\ncontent-type: application/json\r\n`);
    let sent = 0;
    let lines = 0;
    const timer = setInterval(() => {
      if (!socket.writable || sent >= HEADER_BYTES) return clearInterval(timer);
      const line = headerLine(lines++, Math.min(LINE_BYTES, HEADER_BYTES - sent));
      socket.write(line);
      sent += line.length;
      sentBytes += line.length;
    }, TRICKLE_MS);
    socket.on('close', () => clearInterval(timer));
  });
  socket.on('close', () => {
    if (!openedAt) return;
    open -= 1;
    if (!leaving) closedLived.push(performance.now() - openedAt);
  });
  sockets.push(socket);
  if (i % 100 === 99) await sleep(50);
}

const { latencies, failures } = await probing;
await prober.stop();
const endKb = facade.rssKb();
const facadeCpu = (cpuMs(facade.child.pid) - cpuBefore) / (performance.now() - attackStarted);
const openAtEnd = open;
clearInterval(sampler);
leaving = true;
for (const socket of sockets) socket.destroy();
await sleep(Number(options.after) * 1000);
const afterKb = facade.rssKb();

latencies.sort((a, b) => a - b);
closedLived.sort((a, b) => a - b);
console.log(
  JSON.stringify(
    {
      command: `node bench/attacks/large-headers.mjs ${process.argv.slice(2).join(' ')}`.trim(),
      path: options.path,
      webhookPort: options['webhook-port'],
      headerKiB: HEADER_BYTES / 1024,
      attackerConnections: CONNECTIONS,
      opened,
      attackerSentMiB: Math.round(sentBytes / 2 ** 20),
      answers: Object.fromEntries(answers),
      closedByTheServer: closedLived.length,
      closedAfterMs: { p50: Math.round(percentile(closedLived, 50)), max: Math.round(closedLived.at(-1) ?? NaN) },
      stillOpenAtEnd: openAtEnd,
      // Share of one core the facade used during the attack (the machine's other work is not in it).
      facadeCpuShare: Number(facadeCpu.toFixed(2)),
      rssMiB: { before: mib(baselineKb), peak: mib(peakKb), atEnd: mib(endKb), after: mib(afterKb) },
      // When the most attacker connections were open: what they added, per connection (an idle connection's cost when
      // all are held).
      mostOpen: {
        connections: mostOpen.open,
        rssMiB: mib(mostOpen.rssKb),
        kiBPerConnection: mostOpen.open > 0 ? Math.round((mostOpen.rssKb - baselineKb) / mostOpen.open) : null,
      },
      prober: {
        answered: latencies.length,
        failed: failures,
        p50Ms: percentile(latencies, 50)?.toFixed(1),
        p99Ms: percentile(latencies, 99)?.toFixed(1),
        maxMs: latencies.at(-1)?.toFixed(1),
      },
    },
    null,
    2,
  ),
);
await facade.stop();
rmSync(dataDir, { recursive: true, force: true });

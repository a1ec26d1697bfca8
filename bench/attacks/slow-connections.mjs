// Connection exhaustion: an attacker opens many connections and trickles one
// byte every few seconds (slow headers, or headers then a slow body), while a
// prober keeps asking GET /health on fresh connections. Starts its own facade
// (embedded sandbox, SQLite) and prints how many attacker connections were cut
// and when, the prober's answers and latency during the attack, and the CPU
// time the facade spent meanwhile.
//
// --mode line (issue 29): each connection sends a request line a byte every
// --trickle-ms (10 by default) until the headers deadline cuts it: the work of
// reading a line that comes in pieces (re-joining every piece on every read
// made it quadratic).
//
//   node bench/attacks/slow-connections.mjs [--connections 5000] [--seconds 30] [--mode headers|body|line]
//                                           [--trickle-ms 3000] [--dist] [--root <checkout>]
//
// --dist runs the compiled dist/main.js (npm run build first); by default the
// sources run through tsx. --root runs another checkout's facade (built there,
// with --dist). Traffic stays on 127.0.0.1; every loop ends by time.
import { mkdtempSync, rmSync } from 'node:fs';
import { connect } from 'node:net';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { parseArgs } from 'node:util';
import { cpuMs } from '../lib/cpu.mjs';
import { ROOT, sleep, spawnReady } from '../lib/proc.mjs';

const { values: options } = parseArgs({
  options: {
    connections: { type: 'string', default: '5000' },
    seconds: { type: 'string', default: '30' },
    mode: { type: 'string', default: 'headers' },
    'trickle-ms': { type: 'string' },
    dist: { type: 'boolean', default: false },
    root: { type: 'string', default: ROOT },
  },
});
const CONNECTIONS = Number(options.connections);
const SECONDS = Number(options.seconds);
const TRICKLE_MS = Number(options['trickle-ms'] ?? (options.mode === 'line' ? 10 : 3_000));
const root = path.resolve(options.root);
/** What each connection sends first, and then a byte at a time. */
const FIRST = {
  headers: 'G',
  body: 'POST /webhooks HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: 100000\r\n\r\n',
  line: 'GET /graphql?q=',
};
const NEXT = { headers: 'E', body: '{', line: 'q' };
if (!(options.mode in FIRST)) throw new Error(`--mode: headers, body or line, not ${options.mode}`);

function percentile(sorted, p) {
  return sorted.length === 0 ? NaN : sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))];
}

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
  },
  ready: /serving on (http:\/\/\S+)/,
  timeoutMs: 120_000,
});
const origin = facade.match[1];
const { port } = new URL(origin);
const started = performance.now();
const cpuBefore = cpuMs(facade.child.pid);

// The attacker.
const cut = [];
let opened = 0;
let refusedAtOnce = 0;
const sockets = [];
for (let i = 0; i < CONNECTIONS; i += 1) {
  const socket = connect(Number(port), '127.0.0.1');
  const openedAt = performance.now();
  socket.on('error', () => undefined);
  socket.on('close', () => {
    const lived = performance.now() - openedAt;
    if (lived < 50) refusedAtOnce += 1;
    else cut.push(lived);
  });
  socket.on('connect', () => {
    opened += 1;
    socket.resume();
    socket.write(FIRST[options.mode]);
    const timer = setInterval(
      () => (socket.writable ? socket.write(NEXT[options.mode]) : clearInterval(timer)),
      TRICKLE_MS,
    );
    socket.on('close', () => clearInterval(timer));
  });
  sockets.push(socket);
  if (i % 500 === 499) await sleep(10);
}

// The prober: a fresh connection each time, as a new client (or the upstream's webhook sender) would open.
const latencies = [];
const failures = new Map();
const end = started + SECONDS * 1000;
while (performance.now() < end) {
  const asked = performance.now();
  try {
    const response = await fetch(`${origin}/health`, {
      headers: { connection: 'close' },
      signal: AbortSignal.timeout(5_000),
    });
    await response.text();
    if (response.status === 200) latencies.push(performance.now() - asked);
    else failures.set(response.status, (failures.get(response.status) ?? 0) + 1);
  } catch (error) {
    const reason = error.cause?.code ?? error.name;
    failures.set(reason, (failures.get(reason) ?? 0) + 1);
  }
  await sleep(100);
}
const facadeCpuMs = cpuMs(facade.child.pid) - cpuBefore;
for (const socket of sockets) socket.destroy();
latencies.sort((a, b) => a - b);
cut.sort((a, b) => a - b);
console.log(
  JSON.stringify(
    {
      command: `node bench/attacks/slow-connections.mjs ${process.argv.slice(2).join(' ')}`.trim(),
      mode: options.mode,
      trickleMs: TRICKLE_MS,
      attackerConnections: CONNECTIONS,
      // CPU time the facade used from the first attacker connection to the end (the prober's requests included).
      facadeCpuSeconds: Number((facadeCpuMs / 1000).toFixed(2)),
      opened,
      closedAtOnce: refusedAtOnce,
      cutByTheServer: cut.length,
      cutAfterMs: { p50: Math.round(percentile(cut, 50)), max: Math.round(cut.at(-1) ?? NaN) },
      stillOpenAtEnd: CONNECTIONS - refusedAtOnce - cut.length,
      prober: {
        answered: latencies.length,
        failed: Object.fromEntries(failures),
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

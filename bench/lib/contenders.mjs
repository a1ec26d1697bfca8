// Starting each contender as its own process.
import { spawnSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { BENCH, ROOT, spawnReady, stop } from './proc.mjs';
import { PLATFORM_ID } from './fixed-upstream.mjs';
import { METRICS_TOKEN } from './loop-delay.mjs';

/** `keepAliveMs`: the upstream's idle-connection timeout (Node's 5 s by default). */
export function startUpstream(latencyMs = 0, { keepAliveMs } = {}) {
  return spawnReady(process.execPath, [
    path.join(BENCH, 'lib/fixed-upstream.mjs'),
    '0',
    String(latencyMs),
    ...(keepAliveMs ? [String(keepAliveMs)] : []),
  ]).then((p) => ({
    ...p,
    origin: `http://127.0.0.1:${p.match[1]}`,
    url: `http://127.0.0.1:${p.match[1]}/api/v1`,
  }));
}

/** `wrap`: a command line the process runs under (valgrind), with the time it may take to be ready. */
export function startReverseProxy(upstreamOrigin, { wrap = [], timeoutMs, execArgv = [] } = {}) {
  const [command, ...args] = [
    ...wrap,
    process.execPath,
    ...execArgv,
    path.join(BENCH, 'lib/reverse-proxy.mjs'),
    '0',
    upstreamOrigin,
  ];
  return spawnReady(command, args, { timeoutMs }).then((p) => ({
    ...p,
    origin: `http://127.0.0.1:${p.match[1]}`,
  }));
}

let profiled = 0;

/**
 * With BENCH_PROFILE=<dir> (or `npm run bench -- --profile[=dir]`), every facade
 * runs under --cpu-prof and writes <dir>/<label>-<n>.cpuprofile when it stops.
 */
function profileArgs(label) {
  const dir = process.env.BENCH_PROFILE;
  if (!dir) return { args: [] };
  const absolute = path.resolve(dir);
  mkdirSync(absolute, { recursive: true });
  profiled += 1;
  const name = `${label}-${new Date().toISOString().slice(0, 19).replace(/[-:T]/g, '')}-${profiled}.cpuprofile`;
  return {
    args: ['--cpu-prof', `--cpu-prof-dir=${absolute}`, `--cpu-prof-name=${name}`],
    file: path.join(absolute, name),
  };
}

/** This checkout's compiled facade. */
export const FACADE_ENTRY = path.join(ROOT, 'dist/main.js');

/**
 * delivery-graph, compiled (dist/main.js, as in production), against the given
 * upstream. `label` names its CPU profile when profiling (see profileArgs).
 * `entry` and `cwd` run another build (another checkout's dist/main.js, to
 * compare old and new code in one run); this checkout's by default. `execArgv`:
 * Node options before the entry (a bench-only preload, --expose-gc). `wrap`: a
 * command line the process runs under (valgrind), with `timeoutMs` to be ready.
 */
export function startFacade(
  upstreamUrl,
  {
    env = {},
    publicKeyPem,
    issuer = 'bench',
    label = 'facade',
    entry = FACADE_ENTRY,
    cwd = ROOT,
    execArgv = [],
    wrap = [],
    timeoutMs,
  } = {},
) {
  const dataDir = mkdtempSync(path.join(tmpdir(), 'dg-bench-'));
  const extra = {};
  if (publicKeyPem) {
    const file = path.join(dataDir, 'webhook.pem');
    writeFileSync(file, publicKeyPem);
    Object.assign(extra, { WEBHOOK_PUBLIC_KEY_FILE: file, WEBHOOK_ISSUER: issuer });
  } else if (!env.WEBHOOK_PUBLIC_KEY_FILE) {
    // Production without the webhook key must say that polling alone is meant (builds before it ignore the setting).
    extra.WEBHOOKS = 'off';
  }
  const profile = profileArgs(label);
  const [command, ...args] = [...wrap, process.execPath, ...profile.args, ...execArgv, entry];
  return spawnReady(command, args, {
    cwd,
    timeoutMs,
    // No per-key rate limit: the bench sends one key's traffic at thousands of requests a second, and measures serving
    // them, not refusing them (RATE_LIMIT_PER_MINUTE's default would refuse most). Nor a cap on one key's open
    // subscriptions: the fan-out scenario holds 10,000 of one key (SUBSCRIPTIONS_PER_KEY's default is 5,000); nor a cap
    // of connections per address: every client of the bench is 127.0.0.1 (fan-out opens 10,000). /metrics with a token
    // (production serves it to no one otherwise): every scenario reads the event-loop delay there (loop-delay.mjs). The
    // fixed upstream answers every key for every uid, as a key-scoped upstream does: with UPSTREAM_READ_SCOPE=platform
    // (the default) a read of a delivery not booked through the facade would answer null, and the benches would measure
    // that instead of a read.
    env: {
      PORT: '0',
      UPSTREAM_URL: upstreamUrl,
      PLATFORM_ID,
      DATA_DIR: dataDir,
      LOG_LEVEL: 'silent',
      NODE_ENV: 'production',
      RATE_LIMIT_PER_MINUTE: '0',
      SUBSCRIPTIONS_PER_KEY: '0',
      MAX_CONNECTIONS_PER_ADDRESS: '0',
      METRICS_TOKEN,
      UPSTREAM_READ_SCOPE: 'key',
      ...extra,
      ...env,
    },
    ready: /serving on (http:\/\/\S+)/,
  }).then((p) => ({
    ...p,
    origin: p.match[1],
    dataDir,
    async stop() {
      if (!profile.file) return stop(p.child);
      // The profile is written as the process exits: give it time rather than SIGKILL it after 5 s.
      await stop(p.child, 120_000);
      console.log(`CPU profile of ${label}: ${profile.file}`);
    },
  }));
}

export async function startMeshContender(upstreamUrl) {
  return spawnReady(process.execPath, [path.join(BENCH, 'mesh/start.mjs')], {
    env: { UPSTREAM_URL: upstreamUrl, PORT: '0' },
    ready: /listening on http:\/\/[^:]+:(\d+)/,
    timeoutMs: 120_000,
  }).then((p) => ({ ...p, origin: `http://127.0.0.1:${p.match[1]}` }));
}

/** Thrown when a scenario cannot run on this machine; the runner prints why and goes on. */
export class ScenarioSkipped extends Error {}

/**
 * A private redis-server with AOF fsync on every write, as the README recommends.
 * Where there is none, Debian's is installed as the tests do (scripts/redis-server.sh);
 * where that cannot be done either, the scenario is skipped with a line saying why.
 */
/** A second redis-server replicating `primary` (same durability settings); resolves once it is in sync. */
export async function startReplica(primary) {
  const replica = await startRedis(['--replicaof', '127.0.0.1', String(primary.port)]);
  for (let tries = 0; ; tries += 1) {
    const info =
      spawnSync('redis-cli', ['-p', String(replica.port), 'info', 'replication'], { encoding: 'utf8' }).stdout ?? '';
    if (info.includes('master_link_status:up')) return replica;
    if (tries > 200) throw new Error(`the replica on ${replica.port} did not sync:\n${info}`);
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
}

export async function startRedis(extraArgs = []) {
  const found = () => spawnSync('sh', ['-c', 'command -v redis-server'], { stdio: 'ignore' }).status === 0;
  if (!found()) {
    spawnSync('bash', [path.join(ROOT, 'scripts/redis-server.sh'), 'install'], {
      stdio: ['ignore', 'inherit', 'inherit'],
    });
    if (!found())
      throw new ScenarioSkipped(
        'no redis-server on this machine, and scripts/redis-server.sh install could not add it (needs apt-get as root or password-less sudo)',
      );
  }
  const dir = mkdtempSync(path.join(tmpdir(), 'dg-bench-redis-'));
  const { createServer } = await import('node:net');
  const port = await new Promise((resolve) => {
    const probe = createServer().listen(0, '127.0.0.1', () => {
      const { port: free } = probe.address();
      probe.close(() => resolve(free));
    });
  });
  const p = await spawnReady(
    'redis-server',
    [
      '--port',
      String(port),
      '--bind',
      '127.0.0.1',
      '--dir',
      dir,
      '--save',
      '',
      '--appendonly',
      'yes',
      '--appendfsync',
      'always',
      ...extraArgs,
    ],
    {
      ready: /Ready to accept connections/,
    },
  );
  await new Promise((resolve) => setTimeout(resolve, 300));
  return { ...p, port, url: `redis://127.0.0.1:${port}`, version: 'redis-server 7' };
}

// npm run cluster [-- --instances=2 --port=4000]
//
// A whole scale-out set on this machine, for trying failover by hand: a Redis
// primary, a replica and three Sentinels (scripts/sentinel-set.ts), the sandbox,
// and N facade instances, each its own process on the Sentinels. Everything it
// starts listens on a port counted from --port (0: any free ports), so a second
// set, or anything else, can be kept clear of it. Prints where everything is and
// the Redis primary's process id to kill for a failover, then how long each
// failover it sees took; Ctrl-C (or SIGTERM) stops all of it and removes what it
// wrote.
import { spawn, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { DEMO_MERCHANTS, startSandbox } from '@delivery-graph/sandbox';
import { startSentinelSet } from './sentinel-set.js';

const USAGE = `Usage: npm run cluster [-- --instances=N --port=P]

  --instances=N  facade instances to start, 1 to 16 (default 2)
  --port=P       the base port (default 4000): instance i listens on P+i-1, then the
                 sandbox on P+N, the Redis primary on P+N+1, its replica on P+N+2 and
                 the three Sentinels on P+N+3 to P+N+5. 0: every one on a free port.
  --help         show this text

Every instance uses Redis through the Sentinels, the sandbox upstream (the demo
merchant keys) and a folder of its own under a temporary directory. It names the
Redis primary's process id: kill -9 it to try a failover, and it prints how long
the Sentinels took. Ctrl-C stops everything and removes that directory. See
docs/scale-out.md.
`;

const args = process.argv.slice(2);
if (args.includes('--help') || args.includes('-h')) {
  process.stdout.write(USAGE);
  process.exit(0);
}
const flags = Object.fromEntries(args.map((arg) => /^--([\w-]+)=(.*)$/.exec(arg)?.slice(1) ?? [arg, '']));
for (const name of Object.keys(flags)) {
  if (name !== 'instances' && name !== 'port') {
    console.error(`cluster: unknown option ${name}\n\n${USAGE}`);
    process.exit(2);
  }
}
const instances = Number(flags.instances ?? 2);
const basePort = Number(flags.port ?? 4000);
if (!Number.isInteger(instances) || instances < 1 || instances > 16) {
  console.error('cluster: --instances must be a whole number from 1 to 16');
  process.exit(2);
}
/** What listens where: the instances first, then the sandbox, the Redis servers and the Sentinels. */
const layout = [
  ...Array.from({ length: instances }, (_, index) => `instance ${index + 1}`),
  'the sandbox',
  'the Redis primary',
  'the Redis replica',
  'Sentinel 1',
  'Sentinel 2',
  'Sentinel 3',
];
if (
  !Number.isInteger(basePort) ||
  basePort < 0 ||
  (basePort > 0 && basePort < 1024) ||
  basePort + layout.length - 1 > 65535
) {
  console.error(
    `cluster: --port must be 0 (any free ports) or a port from 1024 to ${65536 - layout.length} (it and the ${layout.length - 1} after it are used)`,
  );
  process.exit(2);
}
/** The port of the n-th in the layout; 0 (any free one) without a base. */
const portOf = (n: number) => (basePort === 0 ? 0 : basePort + n);

/** Whether something already listens on the port. */
const busy = (port: number) =>
  new Promise<boolean>((resolve) => {
    const probe = createServer();
    probe.once('error', () => resolve(true));
    probe.listen(port, '127.0.0.1', () => probe.close(() => resolve(false)));
  });
if (basePort !== 0) {
  // Checked before anything starts: one line naming every port taken, rather than a half-started set.
  const taken = (
    await Promise.all(layout.map(async (what, n) => ((await busy(portOf(n))) ? `${portOf(n)} (${what})` : undefined)))
  ).filter(Boolean);
  if (taken.length > 0) {
    console.error(
      `cluster: port${taken.length > 1 ? 's' : ''} ${taken.join(', ')} already in use; pick another base: --port=${basePort + 100}, or --port=0 for any free ports`,
    );
    process.exit(1);
  }
}

const root = path.resolve(import.meta.dirname, '..');
const dir = mkdtempSync(path.join(tmpdir(), 'delivery-graph-cluster-'));
const children: ChildProcess[] = [];
let stopping = false;

console.log('starting a Redis primary, a replica and three Sentinels…');
const redisPorts = [1, 2, 3, 4, 5].map((n) => portOf(instances + n));
const set = await startSentinelSet(
  basePort === 0 ? {} : { ports: redisPorts as [number, number, number, number, number] },
);
const sandbox = await startSandbox({
  port: portOf(instances),
  merchants: DEMO_MERCHANTS,
  knobs: { stepMs: 3000, returnRate: 0 },
});
const keyFile = path.join(dir, 'sandbox-webhook-public.pem');
writeFileSync(keyFile, sandbox.publicKeyPem);
const env = {
  ...process.env,
  UPSTREAM_URL: sandbox.url,
  PLATFORM_ID: sandbox.platformId,
  WEBHOOK_PUBLIC_KEY_FILE: keyFile,
  WEBHOOK_ISSUER: sandbox.issuer,
  REDIS_SENTINELS: set.sentinels,
  REDIS_SENTINEL_NAME: set.name,
  // Every instance must accept the client tokens any of them made.
  CLIENT_TOKEN_SECRET: randomBytes(32).toString('base64'),
  LOG_LEVEL: process.env.LOG_LEVEL ?? 'warn',
};

async function startInstance(index: number): Promise<string> {
  const child = spawn(process.execPath, ['--import', 'tsx', 'src/main.ts'], {
    cwd: root,
    env: { ...env, PORT: String(portOf(index)), DATA_DIR: path.join(dir, `instance-${index + 1}`) },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  children.push(child);
  return new Promise((resolve, reject) => {
    let output = '';
    let served = false;
    child.once('exit', (code) => {
      if (!stopping) reject(new Error(`instance ${index + 1} exited with ${code}:\n${output}`));
    });
    child.stdout!.resume();
    // The instance's banner is on its stderr (its stdout is JSON logs); what it writes there later (a warning) is
    // passed on.
    child.stderr!.on('data', (chunk: Buffer) => {
      if (served) return void process.stderr.write(chunk);
      output += chunk.toString();
      const match = /serving on (http:\/\/\S+)/.exec(output);
      if (match) {
        served = true;
        resolve(match[1]!);
      }
    });
  });
}

async function stopAll(code: number): Promise<never> {
  stopping = true;
  await Promise.all(
    children.map(
      (child) =>
        new Promise<void>((resolve) => {
          if (child.exitCode !== null || child.signalCode !== null) return resolve();
          child.once('exit', () => resolve());
          child.kill('SIGTERM');
        }),
    ),
  );
  await sandbox.stop();
  await set.stop();
  rmSync(dir, { recursive: true, force: true });
  process.exit(code);
}
process.on('SIGINT', () => void stopAll(0));
process.on('SIGTERM', () => void stopAll(0));

let urls: string[];
try {
  urls = await Promise.all(Array.from({ length: instances }, (_, index) => startInstance(index)));
} catch (error) {
  console.error(`cluster: ${error instanceof Error ? error.message : String(error)}`);
  await stopAll(1);
}
// Without a load balancer in front, the sandbox sends its webhooks to the first instance.
sandbox.setWebhookUrl(`${urls![0]}/webhooks`);
const primary = await set.primaryPort();
const lines = [
  '',
  `delivery-graph cluster: ${instances} instance(s) on Redis through Sentinel`,
  ...urls!.map((url, index) => `  instance ${index + 1}          ${url}/graphql   (tracking page ${url}/)`),
  `  Redis primary       127.0.0.1:${primary}   (replica 127.0.0.1:${set.dataPorts.find((port) => port !== primary)})`,
  `  Sentinels           ${set.sentinels}   (monitoring "${set.name}")`,
  `  sandbox upstream    ${sandbox.url}   (webhooks to instance 1)`,
  `  merchant key        ${sandbox.merchants[0]!.key}`,
  '',
  tryFailover(primary),
  'ready; Ctrl-C stops everything.',
];
console.log(lines.join('\n'));
void watchFailovers(primary);

/** How to try a failover on the primary now: the process id to kill. */
function tryFailover(port: number): string {
  return `Try a failover: kill -9 ${set.pidOf(port)}   (the Redis primary, 127.0.0.1:${port}), and watch a subscription on any instance go on while the Sentinels promote the replica; the time it took is printed here.`;
}

/**
 * Each time the primary's process ends (a kill -9 from a shell, a crash), measures how long the Sentinels take to
 * promote the replica until it accepts writes, says so, and brings the old primary back as the new one's replica.
 */
async function watchFailovers(port: number): Promise<void> {
  for (;;) {
    const pid = set.pidOf(port);
    await set.exited(port);
    if (stopping) return;
    const started = performance.now();
    let promoted: number;
    try {
      promoted = await set.failedOverFrom(port, 60_000);
    } catch (error) {
      console.error(`cluster: no failover: ${error instanceof Error ? error.message : String(error)}`);
      return;
    }
    const seconds = ((performance.now() - started) / 1000).toFixed(1);
    console.log(
      `failover: the Redis primary 127.0.0.1:${port} (pid ${pid}) stopped; the Sentinels promoted 127.0.0.1:${promoted}, which took writes ${seconds} s later.`,
    );
    if (stopping) return;
    await set.restartAsReplica(port);
    console.log(`127.0.0.1:${port} is back, as the replica of 127.0.0.1:${promoted}. ${tryFailover(promoted)}`);
    port = promoted;
  }
}

// A private redis-server for one test file: its own free loopback port and temp
// directory, AOF with fsync on every write, no RDB snapshots. restart() kills it
// with SIGKILL (a crash, not a clean shutdown) and starts it again on the same
// port and directory, so what it acknowledged must come back from the AOF.
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { createConnection } from 'node:net';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { findRedisServer, freePort } from '../../scripts/sentinel-set.js';

export { findRedisServer, freePort };

export interface RedisServer {
  url: string;
  port: number;
  dir: string;
  /** SIGKILL, then the same port and directory again; resolves once it answers PING. */
  restart(downMs?: number): Promise<void>;
  /** SIGKILL without a restart (restart() brings it back). */
  kill(): Promise<void>;
  start(): Promise<void>;
  stop(): Promise<void>;
}

const MISSING =
  "redis-server not found (install Debian's redis-server, or run scripts/redis-server.sh start, which does)";

/**
 * Whether this file's Redis tests run. Without a redis-server they are skipped
 * locally, with a line saying so; in CI (CI set) they run and fail loudly.
 */
export function redisAvailable(file: string): boolean {
  if (findRedisServer() || process.env.CI) return true;
  console.warn(`${file}: skipped: ${MISSING}`);
  return false;
}

function ping(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = createConnection({ port, host: '127.0.0.1' });
    const done = (ok: boolean) => {
      socket.destroy();
      resolve(ok);
    };
    socket.setTimeout(500, () => done(false));
    socket.once('error', () => done(false));
    socket.once('connect', () => socket.write('PING\r\n'));
    socket.once('data', (data) => done(data.toString().startsWith('+PONG')));
  });
}

export async function startRedisServer(): Promise<RedisServer> {
  const binary = findRedisServer();
  if (!binary) throw new Error(MISSING);
  const dir = mkdtempSync(path.join(tmpdir(), 'delivery-graph-redis-'));
  let port = await freePort();
  let child: ChildProcess | undefined;
  let output = '';
  const killOnExit = () => child?.kill('SIGKILL');
  process.once('exit', killOnExit);

  const exited = (proc: ChildProcess) =>
    new Promise<void>((resolve) => {
      if (proc.exitCode !== null || proc.signalCode !== null) resolve();
      else proc.once('exit', () => resolve());
    });

  const launch = async (): Promise<boolean> => {
    output = '';
    const proc = spawn(
      binary,
      [
        '--port',
        String(port),
        '--bind',
        '127.0.0.1',
        '--dir',
        dir,
        '--appendonly',
        'yes',
        '--appendfsync',
        'always',
        '--save',
        '',
        '--protected-mode',
        'no',
      ],
      { stdio: ['ignore', 'pipe', 'pipe'] },
    );
    child = proc;
    proc.stdout!.on('data', (chunk: Buffer) => (output += chunk.toString()));
    proc.stderr!.on('data', (chunk: Buffer) => (output += chunk.toString()));
    const deadline = Date.now() + 10_000;
    while (Date.now() < deadline) {
      if (proc.exitCode !== null || proc.signalCode !== null) return false;
      if (await ping(port)) return true;
      await new Promise((resolve) => setTimeout(resolve, 20));
    }
    proc.kill('SIGKILL');
    throw new Error(`redis-server on port ${port} did not answer PING within 10 s:\n${output}`);
  };

  const server: RedisServer = {
    get url() {
      return `redis://127.0.0.1:${port}`;
    },
    get port() {
      return port;
    },
    dir,
    async start() {
      if (await launch()) return;
      throw new Error(`redis-server exited on port ${port}:\n${output}`);
    },
    async kill() {
      if (!child) return;
      const proc = child;
      proc.kill('SIGKILL');
      await exited(proc);
    },
    async restart(downMs = 0) {
      await server.kill();
      if (downMs > 0) await new Promise((resolve) => setTimeout(resolve, downMs));
      await server.start();
    },
    async stop() {
      process.off('exit', killOnExit);
      if (child) {
        const proc = child;
        proc.kill('SIGTERM');
        await exited(proc);
        child = undefined;
      }
      rmSync(dir, { recursive: true, force: true });
    },
  };

  // The port was free a moment ago; if another process took it since, try another.
  for (let attempt = 0; ; attempt += 1) {
    if (await launch()) return server;
    if (attempt === 4) {
      rmSync(dir, { recursive: true, force: true });
      throw new Error(`redis-server did not start:\n${output}`);
    }
    port = await freePort();
  }
}

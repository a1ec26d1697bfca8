// A Redis primary, one replica and three Sentinels on free loopback ports, each
// its own redis-server process (Debian's package: `redis-server --sentinel`),
// in a temporary directory: what the failover tests and `npm run cluster` run.
// The data servers keep an AOF fsync'd on every write, as the single-server
// tests do. The Sentinels call the primary down after 1 s without an answer
// and promote the replica by a majority (2 of 3).
import { spawn, type ChildProcess } from 'node:child_process';
import { accessSync, constants, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { Redis } from 'ioredis';
import { tmpdir } from 'node:os';
import path from 'node:path';

/** The name the Sentinels monitor the primary under (REDIS_SENTINEL_NAME). */
export const SENTINEL_NAME = 'delivery-graph';

export interface SentinelSet {
  /** REDIS_SENTINELS: host:port of the three Sentinels. */
  sentinels: string;
  name: string;
  dir: string;
  /** The data servers' ports, [first primary, first replica]; after a failover the roles are swapped. */
  dataPorts: [number, number];
  /** Asks a Sentinel where the primary is now. */
  primaryPort(): Promise<number>;
  /** SIGKILL of whichever server is the primary now; resolves with its port. */
  killPrimary(): Promise<number>;
  /** The process id of the data server on `port` (undefined when none of ours runs there). */
  pidOf(port: number): number | undefined;
  /** Resolves when the data server on `port` exits, however it was stopped (a `kill -9` from a shell included). */
  exited(port: number): Promise<void>;
  /** SIGSTOP / SIGCONT of the server on `port` (a replica that stops answering, then catches up). */
  pause(port: number): void;
  resume(port: number): void;
  /** Starts the data server on `port` again (after killPrimary), as a replica of the current primary. */
  restartAsReplica(port: number): Promise<void>;
  /** Resolves once the Sentinels have promoted a primary other than `port` and it accepts writes. */
  failedOverFrom(port: number, timeoutMs?: number): Promise<number>;
  stop(): Promise<void>;
}

/** /usr/bin/redis-server, or redis-server on PATH; undefined when there is none. */
export function findRedisServer(): string | undefined {
  const candidates = [
    '/usr/bin/redis-server',
    ...(process.env.PATH ?? '').split(path.delimiter).map((dir) => path.join(dir, 'redis-server')),
  ];
  for (const candidate of candidates) {
    try {
      accessSync(candidate, constants.X_OK);
      return candidate;
    } catch {
      // next
    }
  }
  return undefined;
}

export function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const { port } = server.address() as { port: number };
      server.close(() => resolve(port));
    });
  });
}

/** One command to the server on `port`, on a connection of its own; its reply as ioredis reads it. */
export async function redisCommand(port: number, args: readonly string[], timeoutMs = 1000): Promise<unknown> {
  const client = new Redis({
    port,
    host: '127.0.0.1',
    lazyConnect: true,
    maxRetriesPerRequest: 0,
    retryStrategy: () => null,
    connectTimeout: timeoutMs,
    commandTimeout: timeoutMs,
  });
  client.on('error', () => undefined);
  try {
    await client.connect();
    return await client.call(args[0]!, ...args.slice(1));
  } finally {
    client.disconnect();
  }
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

async function until<T>(what: string, timeoutMs: number, check: () => Promise<T | undefined>): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  let last: unknown;
  while (Date.now() < deadline) {
    try {
      const value = await check();
      if (value !== undefined) return value;
    } catch (error) {
      last = error;
    }
    await sleep(50);
  }
  throw new Error(`${what} within ${timeoutMs} ms${last instanceof Error ? ` (${last.message})` : ''}`);
}

export interface SentinelSetOptions {
  /** The ports of the primary, the replica and the three Sentinels, in that order; default: five free ones. */
  ports?: readonly [number, number, number, number, number];
}

export async function startSentinelSet(options: SentinelSetOptions = {}): Promise<SentinelSet> {
  const binary = findRedisServer();
  if (!binary)
    throw new Error("redis-server not found (install Debian's redis-server, or run scripts/redis-server.sh install)");
  const dir = mkdtempSync(path.join(tmpdir(), 'delivery-graph-sentinels-'));
  const children = new Map<number, ChildProcess>();
  const output = new Map<number, string>();
  const killAll = () => {
    for (const child of children.values()) child.kill('SIGKILL');
  };
  process.once('exit', killAll);

  const launch = (port: number, args: string[]) => {
    const child = spawn(binary, args, { stdio: ['ignore', 'pipe', 'pipe'] });
    output.set(port, '');
    const keep = (chunk: Buffer) => output.set(port, (output.get(port) ?? '') + chunk.toString());
    child.stdout!.on('data', keep);
    child.stderr!.on('data', keep);
    children.set(port, child);
    return child;
  };
  const answers = async (port: number) => (await redisCommand(port, ['PING'], 300)) === 'PONG';

  const dataServer = async (port: number, replicaOf?: number) => {
    const args = [
      '--port',
      String(port),
      '--bind',
      '127.0.0.1',
      '--dir',
      dir,
      '--dbfilename',
      `dump-${port}.rdb`,
      '--appendonly',
      'yes',
      '--appendfilename',
      `aof-${port}.aof`,
      '--appenddirname',
      `aof-${port}`,
      '--appendfsync',
      'always',
      '--save',
      '',
      '--protected-mode',
      'no',
    ];
    if (replicaOf) args.push('--replicaof', '127.0.0.1', String(replicaOf));
    launch(port, args);
    await until(`redis-server on ${port} answering`, 10_000, async () =>
      (await answers(port)) ? true : undefined,
    ).catch((error: Error) => {
      throw new Error(`${error.message}:\n${output.get(port)}`);
    });
  };

  const [primary, replica, ...sentinelPorts] =
    options.ports ?? (await Promise.all([freePort(), freePort(), freePort(), freePort(), freePort()]));
  await dataServer(primary!);
  await dataServer(replica!, primary);
  for (const port of sentinelPorts) {
    const conf = path.join(dir, `sentinel-${port}.conf`);
    writeFileSync(
      conf,
      [
        `port ${port}`,
        'bind 127.0.0.1',
        'protected-mode no',
        `dir ${dir}`,
        `sentinel monitor ${SENTINEL_NAME} 127.0.0.1 ${primary} 2`,
        `sentinel down-after-milliseconds ${SENTINEL_NAME} 1000`,
        `sentinel failover-timeout ${SENTINEL_NAME} 5000`,
        `sentinel parallel-syncs ${SENTINEL_NAME} 1`,
        '',
      ].join('\n'),
    );
    launch(port, [conf, '--sentinel']);
  }
  const ask = async (args: string[]) => {
    for (const port of sentinelPorts) {
      try {
        return await redisCommand(port, args);
      } catch {
        // the next Sentinel
      }
    }
    throw new Error('no Sentinel answered');
  };
  const primaryPort = async () => {
    const reply = (await ask(['SENTINEL', 'get-master-addr-by-name', SENTINEL_NAME])) as [string, string] | null;
    const port = Number(reply?.[1]);
    if (!Number.isInteger(port)) throw new Error(`no primary known yet: ${JSON.stringify(reply)}`);
    return port;
  };
  // Ready when the replica is in sync and every Sentinel knows it and the others (a failover needs both).
  await until('the replica in sync', 15_000, async () =>
    String(await redisCommand(replica!, ['INFO', 'replication'])).includes('master_link_status:up') ? true : undefined,
  );
  await until('the Sentinels agreeing on the primary and its replica', 30_000, async () => {
    for (const port of sentinelPorts) {
      const fields = (await redisCommand(port, ['SENTINEL', 'master', SENTINEL_NAME])) as string[];
      const value = (name: string) => fields[fields.indexOf(name) + 1];
      if (value('num-slaves') !== '1' || value('num-other-sentinels') !== '2') return undefined;
    }
    return true;
  });

  const set: SentinelSet = {
    sentinels: sentinelPorts.map((port) => `127.0.0.1:${port}`).join(','),
    name: SENTINEL_NAME,
    dir,
    dataPorts: [primary!, replica!],
    primaryPort,
    async killPrimary() {
      const port = await primaryPort();
      const child = children.get(port);
      if (!child) throw new Error(`no server of ours on ${port}`);
      child.kill('SIGKILL');
      await new Promise((resolve) =>
        child.exitCode !== null || child.signalCode !== null ? resolve(undefined) : child.once('exit', resolve),
      );
      children.delete(port);
      return port;
    },
    pidOf(port) {
      return children.get(port)?.pid;
    },
    exited(port) {
      const child = children.get(port);
      if (!child || child.exitCode !== null || child.signalCode !== null) return Promise.resolve();
      return new Promise((resolve) => child.once('exit', () => resolve()));
    },
    pause(port) {
      children.get(port)?.kill('SIGSTOP');
    },
    resume(port) {
      children.get(port)?.kill('SIGCONT');
    },
    async restartAsReplica(port) {
      await dataServer(port, await primaryPort());
    },
    async failedOverFrom(port, timeoutMs = 30_000) {
      return until(`a new primary in place of ${port}`, timeoutMs, async () => {
        const now = await primaryPort();
        if (now === port) return undefined;
        const role = (await redisCommand(now, ['ROLE'])) as [string];
        return role[0] === 'master' ? now : undefined;
      });
    },
    async stop() {
      process.off('exit', killAll);
      const exits = [...children.values()].map(
        (child) =>
          new Promise((resolve) =>
            child.exitCode !== null || child.signalCode !== null ? resolve(undefined) : child.once('exit', resolve),
          ),
      );
      for (const child of children.values()) {
        child.kill('SIGCONT');
        child.kill('SIGKILL');
      }
      await Promise.all(exits);
      rmSync(dir, { recursive: true, force: true });
    },
  };
  return set;
}

// `npm run merchant -- <command>`: the operator's commands for merchants
// (src/access/merchant-admin.ts; docs/operations.md, "Rotating a merchant key").
// It opens the store the facade's configuration names (the same environment):
// Redis while the facade runs; the embedded SQLite store only while it is
// stopped (one process per DATA_DIR). Keys are read from standard input.
import { loadConfig } from '../src/config.js';
import { MERCHANT_USAGE, merchantCommand } from '../src/access/merchant-admin.js';
import { RedisStore } from '../src/store/redis.js';
import { SqliteStore } from '../src/store/sqlite.js';
import { DataDirInUseError } from '../src/store/data-dir-lock.js';
import { createUpstream } from '../src/upstream/clients.js';
import { UnauthenticatedError } from '../src/errors.js';
import type { Store } from '../src/store/store.js';

async function readInput(): Promise<string> {
  // A terminal would wait for input the command may not need: only a pipe or a file is read.
  if (process.stdin.isTTY) return '';
  const chunks: Buffer[] = [];
  for await (const chunk of process.stdin) chunks.push(chunk as Buffer);
  return Buffer.concat(chunks).toString('utf8');
}

async function main(): Promise<number> {
  const argv = process.argv.slice(2);
  if (argv.length === 0 || argv[0] === '--help' || argv[0] === 'help') {
    console.log(MERCHANT_USAGE);
    return argv.length === 0 ? 2 : 0;
  }
  const config = loadConfig();
  const redis = config.redisUrl ?? config.redisSentinel;
  let store: Store;
  try {
    store = redis ? RedisStore.connect(redis) : new SqliteStore(config.dataDir);
  } catch (error) {
    if (error instanceof DataDirInUseError) {
      console.error(
        `${error.message}\nWith the embedded store, stop the facade first (the command opens its DATA_DIR).`,
      );
      return 1;
    }
    throw error;
  }
  const upstream = config.upstream.url
    ? createUpstream({ ...config.upstream, url: config.upstream.url, platformId: config.upstream.platformId! })
    : undefined;
  try {
    const accepts = upstream
      ? async (key: string) => {
          try {
            await upstream.platform.availability(key);
            return true;
          } catch (error) {
            if (error instanceof UnauthenticatedError) return false;
            throw error;
          }
        }
      : undefined;
    const result = await merchantCommand(argv, await readInput(), { store, accepts });
    for (const line of result.lines) (result.code === 0 ? console.log : console.error)(line);
    return result.code;
  } finally {
    await upstream?.close();
    await store.close();
  }
}

process.exitCode = await main();

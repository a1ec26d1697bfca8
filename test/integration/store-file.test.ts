// A damaged store file stops the start (or, damaged later, fails /ready) with one
// line that names it and what to do; an emptied one where a store was kept is
// refused rather than silently beginning a new event log. Real files: a store
// is written through SqliteStore, closed, then damaged the way disks and copies
// damage files; the start is the real entry point in a child process.
import { spawn, type ChildProcess } from 'node:child_process';
import {
  closeSync,
  copyFileSync,
  existsSync,
  openSync,
  readFileSync,
  rmSync,
  statSync,
  truncateSync,
  writeSync,
} from 'node:fs';
import path from 'node:path';
import Database from 'better-sqlite3';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { SqliteStore } from '../../src/store/sqlite.js';
import type { WireWebhookEvent } from '../../src/upstream/wire.js';
import { makeDataDir, startStack, type Stack } from '../helpers/stack.js';

const root = new URL('../..', import.meta.url).pathname;
const FILE = 'delivery-graph.sqlite';
const dirs: string[] = [];
afterEach(() => {
  for (const dir of dirs.splice(0)) rmSync(dir, { recursive: true, force: true });
});

/** Events enough for the log to span many pages: its root page is then one a start never reads. */
function events(uid: string, count: number): Array<{ payload: WireWebhookEvent; receivedAt: string }> {
  return Array.from({ length: count }, (_, n) => ({
    payload: {
      uid: `${uid}-${n}`,
      event_name: 'delivery.created',
      status: 'created',
      platform_payload: { note: 'x'.repeat(800) },
    } as unknown as WireWebhookEvent,
    receivedAt: new Date().toISOString(),
  }));
}

/** A data folder holding a store with 300 events and an owner record, closed. */
async function keptStore(): Promise<{ dataDir: string; file: string }> {
  const dataDir = makeDataDir();
  dirs.push(dataDir);
  const store = new SqliteStore(dataDir);
  await store.appendEvents(events('kept', 300));
  await store.recordOwner('kept-0', 'owner-hash', 'PLATFORM');
  await store.cursorSecret();
  await store.close();
  return { dataDir, file: path.join(dataDir, FILE) };
}

/** The page size and the root page of a table, read before the damage. */
function rootPage(file: string, table: string): { pageSize: number; page: number } {
  const db = new Database(file, { readonly: true, fileMustExist: true });
  try {
    const pageSize = db.pragma('page_size', { simple: true }) as number;
    const page = db.prepare<[string], number>('SELECT rootpage FROM sqlite_master WHERE name = ?').pluck().get(table)!;
    return { pageSize, page };
  } finally {
    db.close();
  }
}

/** Overwrites a page with bytes that are no b-tree page, as a bad sector or a torn copy leaves it. */
function overwritePage(file: string, { pageSize, page }: { pageSize: number; page: number }): void {
  const fd = openSync(file, 'r+');
  try {
    writeSync(fd, Buffer.alloc(pageSize, 0xa5), 0, pageSize, (page - 1) * pageSize);
  } finally {
    closeSync(fd);
  }
}

const DAMAGES: Record<string, (file: string) => void> = {
  'a page of the event log overwritten with garbage': (file) => overwritePage(file, rootPage(file, 'events')),
  'cut to half its size': (file) => truncateSync(file, Math.floor(statSync(file).size / 2 / 4096) * 4096),
  'its header overwritten with garbage': (file) => {
    const fd = openSync(file, 'r+');
    writeSync(fd, Buffer.alloc(100, 0x5a), 0, 100, 0);
    closeSync(fd);
  },
};

/** Runs the entry point on `dataDir` until it exits or serves; what it wrote to stderr. */
async function start(dataDir: string): Promise<{ code: number | null; served: boolean; stderr: string }> {
  const child: ChildProcess = spawn(process.execPath, ['--import', 'tsx', 'src/main.ts'], {
    cwd: root,
    env: { PATH: process.env.PATH ?? '', LOG_LEVEL: 'silent', PORT: '0', SANDBOX_PORT: '0', DATA_DIR: dataDir },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let stderr = '';
  child.stderr!.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
  const served = new Promise<true>((resolve) => {
    let stdout = '';
    child.stdout!.on('data', (chunk: Buffer) => {
      stdout += chunk.toString();
      if (/serving on/.test(stdout)) resolve(true);
    });
  });
  const exited = new Promise<false>((resolve) => child.once('exit', () => resolve(false)));
  const didServe = await Promise.race([served, exited]);
  if (didServe) {
    child.kill('SIGKILL');
    await exited;
  }
  return { code: child.exitCode, served: didServe, stderr };
}

/** The line for a damaged `file`, after `prefix` (the start's "delivery-graph: ", or nothing in /ready's body). */
const LINE = (file: string, prefix = 'delivery-graph: ') =>
  new RegExp(
    `^${prefix}${file.replace(/[.*+?^${}()|[\]\\/]/g, '\\$&')} is damaged \\([^\\n]+\\)\\. Stop every process on it and keep a copy of it and its -wal, then restore a backup, or recover what SQLite can still read \\(sqlite3 \\S+ \\.recover \\| sqlite3 \\S+\\) and put \\S+ in its place \\(docs/operations\\.md, "A damaged store file"\\)$`,
  );

describe('a damaged store file at start', () => {
  for (const [damage, apply] of Object.entries(DAMAGES)) {
    it(`stops the start with one line naming the file and what to do: ${damage}`, async () => {
      const { dataDir, file } = await keptStore();
      apply(file);
      const before = readFileSync(file);
      const outcome = await start(dataDir);
      expect(outcome.served).toBe(false);
      expect(outcome.code).toBe(1);
      const lines = outcome.stderr.trim().split('\n');
      expect(lines).toHaveLength(1);
      expect(lines[0]).toMatch(LINE(file));
      // Refused as it was: nothing written to it.
      expect(readFileSync(file).equals(before)).toBe(true);
    });
  }

  it('an intact store opens, its events and records kept', async () => {
    const { dataDir } = await keptStore();
    const store = new SqliteStore(dataDir);
    try {
      expect(await store.lastSeq()).toBe(300);
      expect(await store.ownerOf('kept-0')).toBe('owner-hash');
    } finally {
      await store.close();
    }
  });
});

describe('an emptied store file', () => {
  it('is refused where a store was kept (a zero-byte file): one line, nothing changed, no new log', async () => {
    const { dataDir, file } = await keptStore();
    truncateSync(file, 0);
    const outcome = await start(dataDir);
    expect(outcome.served).toBe(false);
    expect(outcome.code).toBe(1);
    expect(outcome.stderr.trim().split('\n')).toEqual([
      `delivery-graph: ${file} is empty (0 bytes, no tables), but ${file}.lock shows a store was kept in this folder: starting would begin a new, empty event log, so nothing was changed. ` +
        'Restore the file from a backup, or delete it to start a new log on purpose (docs/operations.md, "A damaged store file")',
    ]);
    expect(statSync(file).size).toBe(0);
  });

  it('is refused when it holds a header and no tables', async () => {
    const { dataDir, file } = await keptStore();
    // What a copy that stopped after the first page leaves: a database with nothing in it.
    const bare = path.join(dataDir, 'bare.sqlite');
    const db = new Database(bare);
    db.pragma('journal_mode = WAL');
    db.close();
    copyFileSync(bare, file);
    expect(() => new SqliteStore(dataDir)).toThrow(
      `${file} is empty (4096 bytes, no tables), but ${file}.lock shows a store was kept`,
    );
  });

  it('a folder that never held a store starts a new one; a file deleted on purpose starts a new log, and says so', async () => {
    const fresh = makeDataDir();
    dirs.push(fresh);
    await new SqliteStore(fresh).close();

    const { dataDir, file } = await keptStore();
    rmSync(file);
    const logged: string[] = [];
    const { createLogger } = await import('../../src/logger.js');
    const store = new SqliteStore(dataDir, {
      logger: createLogger('warn', { write: (line: string) => void logged.push(line) }),
    });
    try {
      expect(await store.lastSeq()).toBe(0);
      expect(logged.map((line) => JSON.parse(line).msg)).toEqual([
        'the store file is missing from a data folder that held one: a new, empty event log starts',
      ]);
    } finally {
      await store.close();
    }
    expect(existsSync(file)).toBe(true);
  });
});

describe('a store file damaged while the process runs', () => {
  let stack: Stack | undefined;
  afterEach(async () => {
    await stack?.stop();
    stack = undefined;
  });

  it('fails /ready with the line naming the file once a read finds the damage', async () => {
    stack = await startStack();
    const store = stack.app.services.store as SqliteStore;
    await store.appendEvents(events('running', 300));
    expect((await fetch(`${stack.app.url}/ready`)).status).toBe(200);
    // Everything in the file itself (no page left in the WAL to be read instead), then a page of the log damaged under
    // it.
    store.db.pragma('wal_checkpoint(TRUNCATE)');
    overwritePage(store.db.name, rootPage(store.db.name, 'events'));

    // A replay reads the log and fails.
    await expect(store.eventsAfter(0, 1000)).rejects.toThrow(/malformed/);
    let ready!: { status: number; body: { status: string; store?: string } };
    await vi.waitFor(
      async () => {
        const response = await fetch(`${stack!.app.url}/ready`);
        ready = { status: response.status, body: (await response.json()) as { status: string; store?: string } };
        expect(ready.status).toBe(503);
      },
      { timeout: 5_000, interval: 100 },
    );
    expect(ready.body.status).toBe('store unavailable');
    expect(ready.body.store).toMatch(LINE(store.db.name, ''));
  });
});

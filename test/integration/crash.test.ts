// Crash safety of acknowledged webhooks (CONTRACT.md, "Embedded store"): the
// real entry point in a child process receives signed events as fast as 16
// concurrent senders can push them, is killed with SIGKILL at a random moment,
// and restarted on the same DATA_DIR. Every event it answered 2xx must be in
// the SQLite file exactly once, with the cursor it was acknowledged with; the
// upstream's retries of every event sent (acknowledged or not) must then be
// answered 200 and add no duplicate.
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import Database from 'better-sqlite3';
import { exportSPKI, generateKeyPair, SignJWT, type CryptoKey } from 'jose';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startSandbox, type Sandbox } from '@delivery-graph/sandbox';

/**
 * Kill/restart trials. 3 keep CI quick; the full run of docs/reliability/webhooks-and-crashes.md (20 trials
 * of 2,000 events) is the soak tier's: `npm run test:soak` (see vitest.config.ts;
 * CRASH_TRIALS and CRASH_EVENTS still override either).
 */
const TRIALS = Number(process.env.CRASH_TRIALS ?? 3);
/** Requests in flight at once while the process is being killed. */
const IN_FLIGHT = 16;
/** The SIGKILL lands this long after the first concurrent request, in ms. */
const KILL_AFTER_MS: [number, number] = [50, 300];
/** Tokens signed while the process boots, so the senders are not slowed by signing. */
const PRESIGNED = Number(process.env.CRASH_EVENTS ?? 400);
/** Events spread over this many uids, so ranks and staleness are exercised too. */
const UIDS_PER_TRIAL = 24;

const EVENT_NAMES = [
  'delivery.created',
  'delivery.assigned',
  'location.assigned_driver',
  'delivery.pickup_enroute',
  'location.pickup_enroute',
  'delivery.pickup_arrived',
  'delivery.pickup_complete',
  'delivery.dropoff_enroute',
  'location.dropoff_enroute',
  'delivery.dropoff_arrived',
  'delivery.dropoff_complete',
];

const root = new URL('../..', import.meta.url).pathname;

interface WireEvent {
  uid: string;
  event_name: string;
  status: string;
  platform_payload: { trial: number; n: number };
  driver_location: { lat: number; lng: number } | null;
}

interface Sent {
  event: WireEvent;
  token: string;
  /** HTTP status of the first attempt; undefined when the connection failed. */
  status?: number;
  body?: { status: string; cursor: string; stale: boolean };
}

interface EventRow {
  seq: number;
  uid: string;
  name: string;
  payload: string;
}

let sandbox: Sandbox;
let privateKey: CryptoKey;
let keyDir: string;
let keyFile: string;

beforeAll(async () => {
  // The upstream only has to exist: the facade reads nothing from it here.
  sandbox = await startSandbox({ knobs: { stepMs: 0 } });
  const pair = await generateKeyPair('RS256');
  privateKey = pair.privateKey;
  keyDir = mkdtempSync(path.join(tmpdir(), 'delivery-graph-crash-key-'));
  keyFile = path.join(keyDir, 'webhook-public.pem');
  writeFileSync(keyFile, await exportSPKI(pair.publicKey));
});
afterAll(async () => {
  await sandbox?.stop();
  if (keyDir) rmSync(keyDir, { recursive: true, force: true });
});

function run(dataDir: string): ChildProcess {
  return spawn(process.execPath, ['--import', 'tsx', 'src/main.ts'], {
    cwd: root,
    env: {
      PATH: process.env.PATH ?? '',
      PORT: '0',
      LOG_LEVEL: 'silent',
      DATA_DIR: dataDir,
      UPSTREAM_URL: sandbox.url,
      PLATFORM_ID: sandbox.platformId,
      WEBHOOK_PUBLIC_KEY_FILE: keyFile,
      WEBHOOK_ISSUER: sandbox.issuer,
    },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
}

function waitFor(child: ChildProcess, pattern: RegExp, timeoutMs = 30_000): Promise<RegExpMatchArray> {
  return new Promise((resolve, reject) => {
    let output = '';
    const timer = setTimeout(() => reject(new Error(`no ${pattern} in:\n${output}`)), timeoutMs);
    const onData = (chunk: Buffer) => {
      output += chunk.toString();
      const match = pattern.exec(output);
      if (match) {
        clearTimeout(timer);
        resolve(match);
      }
    };
    child.stdout!.on('data', onData);
    child.stderr!.on('data', onData);
    child.once('exit', (code, signal) => {
      clearTimeout(timer);
      reject(new Error(`exited (${code ?? signal}) before ${pattern}:\n${output}`));
    });
  });
}

const exited = (child: ChildProcess) =>
  new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) => {
    if (child.exitCode !== null || child.signalCode !== null)
      resolve({ code: child.exitCode, signal: child.signalCode });
    else child.once('exit', (code, signal) => resolve({ code, signal }));
  });

async function start(dataDir: string, children: ChildProcess[]): Promise<{ child: ChildProcess; url: string }> {
  const child = run(dataDir);
  children.push(child);
  const url = (await waitFor(child, /serving on (http:\/\/\S+)/))[1]!;
  return { child, url };
}

function makeEvent(trial: number, n: number): WireEvent {
  const name = EVENT_NAMES[Math.floor(n / UIDS_PER_TRIAL) % EVENT_NAMES.length]!;
  return {
    uid: `crash-${trial}-${n % UIDS_PER_TRIAL}`,
    event_name: name,
    status: name.slice(name.indexOf('.') + 1),
    // n makes every event distinct, even when a uid sees the same name twice.
    platform_payload: { trial, n },
    driver_location: name.startsWith('location.') ? { lat: 40 + n / 1e4, lng: -73 - n / 1e4 } : null,
  };
}

function sign(event: WireEvent): Promise<string> {
  return new SignJWT({ payload: event })
    .setProtectedHeader({ alg: 'RS256', typ: 'JWT' })
    .setIssuer(sandbox.issuer)
    .setIssuedAt()
    .setExpirationTime('10m')
    .sign(privateKey);
}

async function post(url: string, sent: Sent): Promise<{ status: number; body: any }> {
  const response = await fetch(`${url}/webhooks`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', authorization: `Bearer ${sent.token}` },
    body: JSON.stringify(sent.event),
    signal: AbortSignal.timeout(10_000),
  });
  const text = await response.text();
  return { status: response.status, body: text ? JSON.parse(text) : undefined };
}

const acknowledged = (sent: Sent) => sent.status !== undefined && sent.status >= 200 && sent.status < 300;

/** The events table, read straight from the file, grouped by the event's n. */
function readEvents(dataDir: string): { rows: EventRow[]; byN: Map<number, EventRow[]> } {
  const db = new Database(path.join(dataDir, 'delivery-graph.sqlite'), { readonly: true, fileMustExist: true });
  try {
    const rows = db.prepare<[], EventRow>('SELECT seq, uid, name, payload FROM events ORDER BY seq').all();
    const byN = new Map<number, EventRow[]>();
    for (const row of rows) {
      const n = (JSON.parse(row.payload) as WireEvent).platform_payload.n;
      byN.set(n, [...(byN.get(n) ?? []), row]);
    }
    return { rows, byN };
  } finally {
    db.close();
  }
}

/** Exactly one row per (uid, name, payload) of the events table. */
function expectNoDuplicates(rows: EventRow[]): void {
  const keys = rows.map((row) => JSON.stringify([row.uid, row.name, JSON.parse(row.payload)]));
  expect(new Set(keys).size).toBe(keys.length);
}

function expectStoredOnce(byN: Map<number, EventRow[]>, sent: Sent): EventRow {
  const rows = byN.get(sent.event.platform_payload.n) ?? [];
  expect(rows, `event ${sent.event.platform_payload.n} (${sent.event.uid} ${sent.event.event_name})`).toHaveLength(1);
  const row = rows[0]!;
  expect({ uid: row.uid, name: row.name, payload: JSON.parse(row.payload) }).toEqual({
    uid: sent.event.uid,
    name: sent.event.event_name,
    payload: sent.event,
  });
  return row;
}

describe('kill -9 while webhooks are being acknowledged', () => {
  const totals = { trials: 0, acknowledged: 0 };

  afterAll(() => {
    console.log(
      `crash trials: ${totals.trials}, events acknowledged before kill -9: ${totals.acknowledged}, lost: 0, duplicated after retries: 0`,
    );
    // Beyond the warm-up events, some were acknowledged while the senders raced the kill.
    if (totals.trials === TRIALS) expect(totals.acknowledged).toBeGreaterThan(TRIALS);
  });

  it.each(Array.from({ length: TRIALS }, (_, index) => index + 1))(
    'trial %i: every acknowledged event survives exactly once, and retries add nothing',
    async (trial) => {
      const dataDir = mkdtempSync(path.join(tmpdir(), 'delivery-graph-crash-'));
      const children: ChildProcess[] = [];
      try {
        const booting = start(dataDir, children);
        booting.catch(() => {}); // awaited below, once the tokens are signed
        const presigned = await Promise.all(Array.from({ length: PRESIGNED }, (_, n) => sign(makeEvent(trial, n))));
        const first = await booting;

        const sent: Sent[] = [];
        const next = async (): Promise<Sent> => {
          const n = sent.length;
          const event = makeEvent(trial, n);
          const entry: Sent = { event, token: '' };
          sent.push(entry);
          entry.token = presigned[n] ?? (await sign(event));
          return entry;
        };

        // One event before the clock starts: the process is warm, and at least one is acknowledged.
        const warm = await next();
        const warmResponse = await post(first.url, warm);
        Object.assign(warm, warmResponse);
        expect(warm.status).toBe(200);

        let killed = false;
        const sender = async () => {
          while (!killed) {
            const entry = await next();
            try {
              const response = await post(first.url, entry);
              entry.status = response.status;
              entry.body = response.body;
            } catch {
              // Connection reset or refused: the process is gone; the event may or may not be stored.
            }
          }
        };
        const delay = KILL_AFTER_MS[0] + Math.random() * (KILL_AFTER_MS[1] - KILL_AFTER_MS[0]);
        const senders = Array.from({ length: IN_FLIGHT }, sender);
        await new Promise((resolve) => setTimeout(resolve, delay));
        killed = true;
        first.child.kill('SIGKILL');
        expect(await exited(first.child)).toEqual({ code: null, signal: 'SIGKILL' });
        await Promise.all(senders);

        const acked = sent.filter(acknowledged);
        totals.trials += 1;
        totals.acknowledged += acked.length;
        // Nothing but 2xx (or no answer at all) while the store works.
        expect(
          sent.filter((entry) => entry.status !== undefined && !acknowledged(entry)).map((entry) => entry.status),
        ).toEqual([]);
        for (const entry of acked)
          expect(entry.body).toMatchObject({ status: 'stored', cursor: expect.stringMatching(/^\d+$/) });

        // Restart on the same data directory: everything acknowledged is there, once, under its cursor.
        const second = await start(dataDir, children);
        const afterCrash = readEvents(dataDir);
        expectNoDuplicates(afterCrash.rows);
        const survivors = acked.map((entry) => expectStoredOnce(afterCrash.byN, entry));
        expect(survivors.map((row) => String(row.seq))).toEqual(acked.map((entry) => entry.body!.cursor));

        // The upstream retries every event it saw no 2xx for (and some it did): all 200, nothing twice.
        const retries = [...sent];
        const retried = new Map<Sent, { status: number; body: any }>();
        await Promise.all(
          Array.from({ length: IN_FLIGHT }, async () => {
            for (let entry = retries.shift(); entry; entry = retries.shift())
              retried.set(entry, await post(second.url, entry));
          }),
        );
        for (const entry of sent) {
          const response = retried.get(entry)!;
          expect(response.status).toBe(200);
          if (acknowledged(entry))
            expect(response.body).toMatchObject({ status: 'duplicate', cursor: entry.body!.cursor });
          else expect(['stored', 'duplicate']).toContain(response.body.status);
        }

        const stopped = exited(second.child);
        second.child.kill('SIGTERM');
        expect(await stopped).toEqual({ code: 0, signal: null });

        const final = readEvents(dataDir);
        expectNoDuplicates(final.rows);
        expect(final.rows).toHaveLength(sent.length);
        for (const entry of sent) {
          const row = expectStoredOnce(final.byN, entry);
          expect(String(row.seq)).toBe(retried.get(entry)!.body.cursor);
        }
      } finally {
        for (const child of children) if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
        await Promise.all(children.map(exited));
        rmSync(dataDir, { recursive: true, force: true });
      }
    },
    // Two cold starts of the entry point per trial: slow on a loaded machine.
    30_000,
  );
});

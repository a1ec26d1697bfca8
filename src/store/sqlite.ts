// The embedded store: one SQLite file under DATA_DIR, in WAL mode with full
// fsync, so that what it acknowledged survives a kill -9 and a power cut.
// Every write goes to the writer thread (sqlite-writer.ts), which owns the one
// writing connection: a commit waits on the disk there, never on this thread's
// event loop, and writes that arrive meanwhile join the next commit. Reads run
// here on a connection of their own: WAL lets a reader see every committed
// transaction while a write runs, and a write is answered only after its
// commit, so what a caller awaited it reads back.
// With a retention, a timer deletes what expired in small transactions and
// hands the freed pages back to the file system a few at a time (#trim).
import { existsSync, mkdirSync } from 'node:fs';
import path from 'node:path';
import { createRequire } from 'node:module';
import { fileURLToPath } from 'node:url';
import { MessageChannel, Worker, type WorkerOptions } from 'node:worker_threads';
import Database from 'better-sqlite3';
import type { Logger } from '../logger.js';
import type { JsonObject, WireWebhookEvent } from '../upstream/wire.js';
import type { MilestoneState } from '../domain/milestones.js';
import { viewBody, type StoredView } from '../domain/delivery-view.js';
import { TrimSchedule, trimIntervalMs, yieldToEventLoop, type Retention } from './retention.js';
import {
  PartialAppendError,
  courierPart,
  flagsOf,
  type AppendResult,
  type BookingResult,
  type DeliveryState,
  type EventFilter,
  type IdempotencyClaim,
  type OwnerEntry,
  type OwnerGroup,
  type OwnerProof,
  type MerchantLink,
  type MerchantMerge,
  type OwnerClaims,
  type OwnerRecord,
  type ReadRecord,
  type Store,
  type StoredEvent,
  supersedes,
  type UnfinishedDelivery,
  type UnfinishedPage,
} from './store.js';
import { bookingMarker } from '../domain/booking-marker.js';
import { lockDataDir, type DataDirLock } from './data-dir-lock.js';
import { checkStoreFile, damagedFileMessage, isDamage } from './sqlite-file.js';
import type {
  AppendOutcome,
  EventRow,
  TrimPhase,
  WriterArgs,
  WriterData,
  WriterError,
  WriterOps,
  WriterReply,
  WriterRequest,
} from './sqlite-writer.js';

function toStored(row: EventRow): StoredEvent {
  return {
    seq: row.seq,
    uid: row.uid,
    name: row.name,
    statusText: row.status_text,
    receivedAt: row.received_at,
    ...flagsOf(row.stale),
    payload: JSON.parse(row.payload) as WireWebhookEvent,
    ...(row.carried ? { carried: JSON.parse(row.carried) as JsonObject } : {}),
  };
}

interface StateRow {
  rank: number;
  terminal: number;
  seq: number;
  courier: string | null;
  former_couriers: string | null;
  picked_up: number | null;
}

const stateOf = (row: StateRow): MilestoneState => ({
  rank: row.rank,
  terminal: row.terminal === 1,
  ...(row.picked_up === 1 ? { pickedUp: true as const } : {}),
  ...courierPart(row.courier, row.former_couriers),
});

/** Owner records one page of unfinishedDeliveries looks at, at most (well under a millisecond of index reads). */
const UNFINISHED_SCAN = 500;
const cursorOf = (row: { created_at: number; uid: string }) => `${row.created_at} ${row.uid}`;

const ownerGroup = (value: string | null): OwnerGroup | null =>
  value === 'PLATFORM' || value === 'PARTNER' ? value : null;
const OWNER_PROOFS: ReadonlySet<string> = new Set<OwnerProof>(['booked', 'reference', 'canceled', 'claimed', 'read']);
const ownerProof = (value: string | null): OwnerProof | null =>
  value !== null && OWNER_PROOFS.has(value) ? (value as OwnerProof) : null;

export interface SqliteStoreOptions {
  fileName?: string;
  /** Delete what is older than this, on a timer; without it nothing is ever deleted. */
  retention?: Retention;
  logger?: Logger;
}

const IDEMPOTENCY_COLUMNS = `
        owner_hash TEXT NOT NULL,
        idempotency_key TEXT NOT NULL,
        fingerprint TEXT NOT NULL,
        state TEXT NOT NULL CHECK (state IN ('pending', 'done', 'unknown')),
        uid TEXT,
        tracking_url TEXT,
        updated_at INTEGER NOT NULL,
        marker TEXT,
        PRIMARY KEY (owner_hash, idempotency_key)`;

/**
 * A file made before the 'unknown' state has a CHECK that refuses it, and no
 * marker column; SQLite cannot alter a CHECK, so the table is copied into a new one.
 */
function upgradeIdempotencyTable(db: Database.Database): void {
  const table = db
    .prepare<[], { sql: string }>("SELECT sql FROM sqlite_master WHERE type = 'table' AND name = 'idempotency'")
    .get();
  if (!table || table.sql.includes("'unknown'")) return;
  db.transaction(() => {
    db.exec(`CREATE TABLE idempotency_upgraded (${IDEMPOTENCY_COLUMNS});`);
    const rows = db
      .prepare<[], { owner_hash: string; idempotency_key: string }>(
        'SELECT owner_hash, idempotency_key FROM idempotency',
      )
      .all();
    db.exec(
      'INSERT INTO idempotency_upgraded (owner_hash, idempotency_key, fingerprint, state, uid, tracking_url, updated_at) SELECT owner_hash, idempotency_key, fingerprint, state, uid, tracking_url, updated_at FROM idempotency',
    );
    const mark = db.prepare('UPDATE idempotency_upgraded SET marker = ? WHERE owner_hash = ? AND idempotency_key = ?');
    for (const row of rows)
      mark.run(bookingMarker(row.owner_hash, row.idempotency_key), row.owner_hash, row.idempotency_key);
    db.exec('DROP TABLE idempotency; ALTER TABLE idempotency_upgraded RENAME TO idempotency;');
  }).immediate();
}

/** An error from the writer thread, as it was thrown there (a SqliteError keeps its code). */
function writerError({ name, message, code }: WriterError): Error {
  return Object.assign(new Error(message), { name, ...(code ? { code } : {}) });
}

/** The writer's source as one CommonJS bundle, built once per process (see startWriterThread). */
let writerBundle: string | undefined;

/**
 * Starts the writer thread from the compiled file next to this one (node
 * dist/main.js). When this module runs as TypeScript (tsx: tests, npm start)
 * there is no compiled file, and a thread started through tsx's loader takes
 * half a second or more: esbuild (tsx's own compiler) bundles the writer's
 * source once, and each thread runs that bundle, requiring better-sqlite3 from here.
 */
function startWriterThread(options: WorkerOptions): Worker {
  if (!import.meta.url.endsWith('.ts')) return new Worker(new URL('./sqlite-writer.js', import.meta.url), options);
  const require = createRequire(import.meta.url);
  if (!writerBundle) {
    const esbuild = require('esbuild') as typeof import('esbuild');
    const entry = fileURLToPath(new URL('./sqlite-writer.ts', import.meta.url));
    const built = esbuild.buildSync({
      entryPoints: [entry],
      bundle: true,
      platform: 'node',
      format: 'cjs',
      target: 'node20',
      external: ['better-sqlite3'],
      write: false,
    });
    writerBundle = built.outputFiles[0]!.text;
  }
  const source = `((require) => {\n${writerBundle}\n})(require('node:module').createRequire(${JSON.stringify(import.meta.url)}));`;
  return new Worker(source, { ...options, eval: true });
}

/** The main thread's side of a writer thread: requests by id, answered in order. */
class WriterThread {
  /**
   * A thread whose store closed, kept (idle, not holding the process) for the
   * next store this process opens: starting one costs tens of ms, and a test
   * opens hundreds of stores. At most one is kept.
   */
  static #spare: WriterThread | undefined;

  /** The spare thread, or a new one. */
  static take(logger: Logger | undefined): WriterThread {
    const spare = WriterThread.#spare;
    WriterThread.#spare = undefined;
    return spare && !spare.#stopped ? spare : new WriterThread(logger);
  }

  readonly worker: Worker;
  readonly #port;
  readonly #waiting = new Map<number, { resolve(value: unknown): void; reject(error: Error): void }>();
  #nextId = 1;
  /** Set once the thread is gone: every request from then on fails with it. */
  #stopped: Error | undefined;
  #ending = false;

  private constructor(logger: Logger | undefined) {
    const { port1, port2 } = new MessageChannel();
    const data: WriterData = { port: port2 };
    // No flags from this process (--import tsx, --input-type…): the thread needs none.
    this.worker = startWriterThread({ workerData: data, transferList: [port2], execArgv: [] });
    this.#port = port1;
    port1.on('message', (reply: WriterReply) => {
      const waiting = this.#waiting.get(reply.id);
      if (!waiting) return;
      this.#waiting.delete(reply.id);
      if ('error' in reply) waiting.reject(writerError(reply.error));
      else waiting.resolve(reply.value);
      if (this.#waiting.size === 0) this.#holdProcess(false);
    });
    this.worker.on('error', (error) => {
      if (!this.#ending) logger?.error({ err: error }, 'the SQLite writer thread failed');
      this.#stop(`it failed: ${error.message}`);
    });
    this.worker.on('exit', (code) => this.#stop(`it exited with code ${code}`));
    this.#holdProcess(false);
  }

  /** Sends a request; resolves with its answer once the transaction that held it has committed. */
  call<Op extends keyof WriterOps>(op: Op, ...args: WriterArgs<Op>): Promise<ReturnType<WriterOps[Op]>> {
    if (this.#stopped) return Promise.reject(this.#stopped);
    const id = this.#nextId++;
    const request: WriterRequest = { id, op, now: Date.now(), args };
    return new Promise((resolve, reject) => {
      this.#waiting.set(id, { resolve: resolve as (value: unknown) => void, reject });
      if (this.#waiting.size === 1) this.#holdProcess(true);
      try {
        this.#port.postMessage(request);
      } catch (error) {
        // Arguments that cannot be copied to the thread: nothing was sent.
        this.#waiting.delete(id);
        if (this.#waiting.size === 0) this.#holdProcess(false);
        throw error;
      }
    });
  }

  /** Its store closed: kept as the spare when there is none, ended otherwise. */
  async release(): Promise<void> {
    if (!this.#stopped && !WriterThread.#spare) {
      WriterThread.#spare = this;
      return;
    }
    this.#ending = true;
    await this.worker.terminate();
  }

  #stop(reason: string): void {
    if (this.#stopped) return;
    this.#stopped = new Error(
      `The SQLite writer thread stopped (${reason}); nothing more can be written to the store.`,
    );
    for (const waiting of this.#waiting.values()) waiting.reject(this.#stopped);
    this.#waiting.clear();
    this.#port.close();
  }

  /** A request waiting for its answer keeps the process alive; an idle thread does not. */
  #holdProcess(hold: boolean): void {
    if (hold) {
      this.worker.ref();
      this.#port.ref();
    } else {
      this.worker.unref();
      this.#port.unref();
    }
  }
}

export class SqliteStore implements Store {
  /** The main thread's connection: the store reads through it and never writes (the writer thread does). */
  readonly db: Database.Database;
  readonly #statements;
  readonly #thread: WriterThread;
  /** Set by close(): the thread may serve another store by then. */
  #closed = false;
  readonly #retention: Retention | undefined;
  readonly #trims: TrimSchedule | undefined;
  #cursorSecret: Buffer | undefined;
  readonly #lock: DataDirLock;
  readonly #logger: Logger | undefined;
  /**
   * Owner records on their way to the writer thread or waiting for their commit,
   * by uid (the first sent, which is the one the file keeps, and how many writes
   * of that uid are pending). They are not in the file yet: ownersOf answers
   * them from here, as it would had the write been synchronous.
   */
  readonly #ownersInFlight = new Map<string, { record: OwnerRecord; writes: number }>();
  /** Why the file reads as damaged, once a read or write found it so (ping() fails with it). */
  #damage: string | undefined;

  constructor(dataDir: string, options: SqliteStoreOptions = {}) {
    mkdirSync(dataDir, { recursive: true });
    const file = path.join(dataDir, options.fileName ?? 'delivery-graph.sqlite');
    // Before the file is opened: a second process stops here, having changed nothing.
    this.#lock = lockDataDir(dataDir, file);
    try {
      const created = !existsSync(file);
      this.db = new Database(file);
      try {
        // First: the writer thread of another store on this file may hold it a moment.
        this.db.pragma('busy_timeout = 5000');
        // Before anything is written to it: a damaged or emptied file stops the start, unchanged.
        checkStoreFile(this.db, { created, heldBefore: this.#lock.existed, lockFile: this.#lock.file }, options.logger);
      } catch (error) {
        this.db.close();
        throw error;
      }
    } catch (error) {
      this.#lock.release();
      throw error;
    }
    // Takes effect on a new file only (before its first table); a file created before keeps
    // auto_vacuum = NONE: its freed pages are reused by new rows, but the file does not shrink.
    this.db.pragma('auto_vacuum = INCREMENTAL');
    this.db.pragma('journal_mode = WAL');
    this.db.pragma('synchronous = FULL');
    upgradeIdempotencyTable(this.db);
    this.db.exec(`
      CREATE TABLE IF NOT EXISTS idempotency (${IDEMPOTENCY_COLUMNS});
      CREATE TABLE IF NOT EXISTS events (
        seq INTEGER PRIMARY KEY AUTOINCREMENT,
        uid TEXT NOT NULL,
        name TEXT NOT NULL,
        hash TEXT NOT NULL,
        status_text TEXT,
        received_at TEXT NOT NULL,
        stale INTEGER NOT NULL,
        payload TEXT NOT NULL,
        carried TEXT
      );
      CREATE UNIQUE INDEX IF NOT EXISTS events_dedup ON events (uid, name, hash);
      CREATE INDEX IF NOT EXISTS events_by_uid ON events (uid, seq);
      CREATE TABLE IF NOT EXISTS delivery_state (
        uid TEXT PRIMARY KEY,
        rank REAL NOT NULL,
        terminal INTEGER NOT NULL,
        seq INTEGER NOT NULL,
        courier TEXT,
        former_couriers TEXT,
        picked_up INTEGER,
        view TEXT
      );
      -- A read of a delivery that has no state yet, kept for its first event to be merged over (delivery-view.ts).
      CREATE TABLE IF NOT EXISTS read_views (uid TEXT PRIMARY KEY, view TEXT NOT NULL, read_at INTEGER NOT NULL);
      CREATE TABLE IF NOT EXISTS ownership (
        uid TEXT PRIMARY KEY,
        owner_hash TEXT NOT NULL,
        created_at INTEGER NOT NULL,
        api_group TEXT
      );
      -- A key hash (or merchant id) → the merchant it belongs to (src/access/merchants.ts); kept whatever the retention.
      CREATE TABLE IF NOT EXISTS merchant_links (
        id TEXT PRIMARY KEY,
        merchant TEXT NOT NULL,
        created_at INTEGER NOT NULL
      );
      CREATE TABLE IF NOT EXISTS readiness (id INTEGER PRIMARY KEY CHECK (id = 1), checked_at INTEGER NOT NULL);
      CREATE TABLE IF NOT EXISTS meta (name TEXT PRIMARY KEY, value BLOB NOT NULL);
      -- For the retention: expired ownership and idempotency rows are found by time.
      CREATE INDEX IF NOT EXISTS idempotency_by_time ON idempotency (updated_at);
      -- A webhook's booking marker finds its claim.
      CREATE INDEX IF NOT EXISTS idempotency_by_marker ON idempotency (marker);
      CREATE INDEX IF NOT EXISTS read_views_by_time ON read_views (read_at);
      -- Reconciliation pages through each owner's recent records (unfinishedDeliveries).
      CREATE INDEX IF NOT EXISTS ownership_by_owner ON ownership (owner_hash, created_at, uid);
      -- Whether ids are linked to a merchant (its history: linkMerchant), and which (mergeMerchant).
      CREATE INDEX IF NOT EXISTS merchant_links_by_merchant ON merchant_links (merchant);
    `);
    // A file made before groups were kept gains the column; its records read with no group.
    const ownershipColumns = this.db
      .prepare<[], { name: string }>("SELECT name FROM pragma_table_info('ownership')")
      .all();
    if (!ownershipColumns.some((column) => column.name === 'api_group'))
      this.db.exec('ALTER TABLE ownership ADD COLUMN api_group TEXT');
    // A file made before proofs were kept: its records read with none, which counts as a read (src/store/store.ts,
    // OwnerProof).
    if (!ownershipColumns.some((column) => column.name === 'proof'))
      this.db.exec('ALTER TABLE ownership ADD COLUMN proof TEXT');
    // A record's retention counts from its last proof (proved_at; created_at stays when it was made): a file from
    // before counts from the making. The retention finds expired records by it.
    if (!ownershipColumns.some((column) => column.name === 'proved_at'))
      this.db.exec('ALTER TABLE ownership ADD COLUMN proved_at INTEGER; UPDATE ownership SET proved_at = created_at;');
    this.db.exec(
      'CREATE INDEX IF NOT EXISTS ownership_by_proof ON ownership (proved_at); DROP INDEX IF EXISTS ownership_by_time;',
    );
    // A file made before couriers were kept: its states gain the columns, empty (no courier known yet).
    const stateColumns = new Set(
      this.db
        .prepare<[], { name: string }>('PRAGMA table_info(delivery_state)')
        .all()
        .map((column) => column.name),
    );
    if (!stateColumns.has('courier'))
      this.db.exec(
        'ALTER TABLE delivery_state ADD COLUMN courier TEXT; ALTER TABLE delivery_state ADD COLUMN former_couriers TEXT;',
      );
    // A file made before evidence and views were kept: no pickup proven yet, an empty view, nothing carried over.
    if (!stateColumns.has('picked_up'))
      this.db.exec(
        'ALTER TABLE delivery_state ADD COLUMN picked_up INTEGER; ALTER TABLE delivery_state ADD COLUMN view TEXT;',
      );
    const eventColumns = new Set(
      this.db
        .prepare<[], { name: string }>('PRAGMA table_info(events)')
        .all()
        .map((column) => column.name),
    );
    if (!eventColumns.has('carried')) this.db.exec('ALTER TABLE events ADD COLUMN carried TEXT;');
    this.#retention = options.retention;
    // The tables exist: the writer thread's connection can prepare its statements.
    this.#thread = WriterThread.take(options.logger);
    // A file that cannot be opened there fails every write after it, and readiness.
    this.#thread
      .call('open', this.db.name, options.retention)
      .catch((error: unknown) =>
        options.logger?.error({ err: error }, 'the SQLite writer thread could not open the file'),
      );
    this.#trims =
      options.retention &&
      new TrimSchedule((stopping) => this.#trim(stopping), trimIntervalMs(options.retention), options.logger);
    this.#statements = {
      getOwner: this.db.prepare<
        [string, number],
        { owner_hash: string; api_group: string | null; proof: string | null }
      >('SELECT owner_hash, api_group, proof FROM ownership WHERE uid = ? AND proved_at >= ?'),
      getLink: this.db.prepare<[string], { merchant: string }>('SELECT merchant FROM merchant_links WHERE id = ?'),
      getState: this.db.prepare<[string], StateRow>(
        'SELECT rank, terminal, seq, courier, former_couriers, picked_up FROM delivery_state WHERE uid = ?',
      ),
      getView: this.db.prepare<[string], { view: string | null }>('SELECT view FROM delivery_state WHERE uid = ?'),
      eventsAfter: this.db.prepare<[number, number], EventRow>(
        'SELECT * FROM events WHERE seq > ? ORDER BY seq LIMIT ?',
      ),
      eventsOfUidAfter: this.db.prepare<[string, number, number], EventRow>(
        'SELECT * FROM events WHERE uid = ? AND seq > ? ORDER BY seq LIMIT ?',
      ),
      latestDelivery: this.db.prepare<[string], EventRow>(
        "SELECT * FROM events WHERE uid = ? AND (stale & 1) = 0 AND name LIKE 'delivery.%' ORDER BY seq DESC LIMIT 1",
      ),
      latestLocation: this.db.prepare<[string], EventRow>(
        "SELECT * FROM events WHERE uid = ? AND (stale & 1) = 0 AND json_extract(payload, '$.driver_location.lat') IS NOT NULL ORDER BY seq DESC LIMIT 1",
      ),
      // The highest seq ever given (AUTOINCREMENT's record), which trimming the log does not lower.
      lastSeq: this.db.prepare<[], { seq: number }>("SELECT seq FROM sqlite_sequence WHERE name = 'events'"),
      ping: this.db.prepare('SELECT 1'),
      // An owner's records from a (created_at, uid) position on, with the state of each delivery, if any.
      ownedAfter: this.db.prepare<
        [string, number, number, number, string, number],
        { uid: string; api_group: string | null; created_at: number; terminal: number | null }
      >(
        `SELECT o.uid, o.api_group, o.created_at, d.terminal FROM ownership o LEFT JOIN delivery_state d ON d.uid = o.uid
         WHERE o.owner_hash = ? AND o.created_at >= ? AND (o.created_at > ? OR (o.created_at = ? AND o.uid > ?))
         ORDER BY o.created_at, o.uid LIMIT ?`,
      ),
    };
    this.#logger = options.logger;
  }

  /** Writes owner records on the writer thread; each uid counts as in flight until its write settles. */
  async #writeOwners(records: readonly OwnerEntry[]): Promise<void> {
    for (const entry of records) {
      const { uid, owner, group } = entry;
      const record: OwnerRecord = { owner, group, proof: entry.proof ?? 'read' };
      const sending = this.#ownersInFlight.get(uid);
      if (sending) {
        sending.writes += 1;
        // The writer applies the same rule in the order sent: what the file will hold once both commit.
        if (supersedes(entry, sending.record)) sending.record = record;
      } else this.#ownersInFlight.set(uid, { record, writes: 1 });
    }
    try {
      await this.#write('recordOwners', records);
    } finally {
      for (const { uid } of records) {
        const sending = this.#ownersInFlight.get(uid)!;
        sending.writes -= 1;
        if (sending.writes === 0) this.#ownersInFlight.delete(uid);
      }
    }
  }

  /** The writer thread, for tests and diagnostics. */
  get writerThread(): Worker {
    return this.#thread.worker;
  }

  /** A read on this thread; a file found damaged by it fails readiness from then on. */
  #read<T>(read: () => T): T {
    try {
      return read();
    } catch (error) {
      this.#noticeDamage(error);
      throw error;
    }
  }

  /**
   * SQLite found the file damaged after the start (see sqlite-file.ts): logged once, and every ping() fails naming the
   * file.
   */
  #noticeDamage(error: unknown): void {
    if (this.#damage || !isDamage(error)) return;
    this.#damage = damagedFileMessage(this.db.name, error.message);
    this.#logger?.error(
      { err: error, file: this.db.name },
      'the store file is damaged: /ready fails until it is restored',
    );
  }

  /** Sends a write to the writer thread; after close() it fails at once. */
  #write<Op extends keyof WriterOps>(op: Op, ...args: WriterArgs<Op>): Promise<ReturnType<WriterOps[Op]>> {
    if (this.#closed)
      return Promise.reject(new Error('The SQLite store is closed; nothing more can be written to it.'));
    return this.#thread.call(op, ...args).catch((error: unknown) => {
      this.#noticeDamage(error);
      throw error;
    });
  }

  async appendEvents(
    events: ReadonlyArray<{ payload: WireWebhookEvent; receivedAt: string }>,
  ): Promise<AppendResult[]> {
    // One transaction for the batch (one fsync) on the writer thread; each event in a savepoint of its own.
    // Each payload crosses to the thread as its JSON, which is what is stored; one that cannot be written fails alone.
    const outcomes: Array<AppendResult | Error | undefined> = [];
    const sent: Array<{ json: string; receivedAt: string }> = [];
    const sentIndex: number[] = [];
    events.forEach(({ payload, receivedAt }, index) => {
      try {
        sent.push({ json: JSON.stringify(payload), receivedAt });
        sentIndex.push(index);
      } catch (error) {
        outcomes[index] = error instanceof Error ? error : new Error(String(error));
      }
    });
    const answers = sent.length > 0 ? await this.#write('append', sent) : [];
    answers.forEach((answer, n) => {
      const index = sentIndex[n]!;
      outcomes[index] = this.#appended(answer, events[index]!);
    });
    if (outcomes.some((outcome) => outcome instanceof Error))
      throw new PartialAppendError(outcomes as Array<AppendResult | Error>);
    return outcomes as AppendResult[];
  }

  /** One event's answer from the thread, as the store's caller gets it. */
  #appended(
    answer: AppendOutcome,
    { payload, receivedAt }: { payload: WireWebhookEvent; receivedAt: string },
  ): AppendResult | Error {
    if ('error' in answer) {
      const error = writerError(answer.error);
      this.#noticeDamage(error);
      return error;
    }
    if (answer.duplicate) return { event: toStored(answer.row), duplicate: true };
    const { seq, mark, statusText, carried } = answer;
    const event: StoredEvent = {
      seq,
      uid: payload.uid,
      name: payload.event_name,
      statusText,
      receivedAt,
      ...flagsOf(mark),
      payload,
    };
    if (carried) event.carried = JSON.parse(carried) as JsonObject;
    return { event, duplicate: false };
  }

  async eventsAfter(afterSeq: number, limit: number, filter: EventFilter = {}): Promise<StoredEvent[]> {
    const uids = filter.uids;
    let rows: EventRow[];
    if (uids && uids.length > 0) {
      // Per uid through the (uid, seq) index, then merged in log order.
      rows = this.#read(() => uids.flatMap((uid) => this.#statements.eventsOfUidAfter.all(uid, afterSeq, limit)));
      rows.sort((a, b) => a.seq - b.seq);
      rows = rows.slice(0, limit);
    } else {
      rows = this.#read(() => this.#statements.eventsAfter.all(afterSeq, limit));
    }
    return rows.map(toStored);
  }

  async latestEvent(uid: string, kind: 'delivery' | 'location'): Promise<StoredEvent | undefined> {
    const row = this.#read(() =>
      kind === 'delivery' ? this.#statements.latestDelivery.get(uid) : this.#statements.latestLocation.get(uid),
    );
    return row ? toStored(row) : undefined;
  }

  async deliveryState(uid: string): Promise<DeliveryState | undefined> {
    const row = this.#read(() => this.#statements.getState.get(uid));
    return row ? { ...stateOf(row), seq: row.seq } : undefined;
  }

  async deliveryView(uid: string): Promise<JsonObject | undefined> {
    const row = this.#statements.getView.get(uid);
    return row ? viewBody(uid, row.view ? (JSON.parse(row.view) as StoredView) : {}) : undefined;
  }

  recordRead(read: ReadRecord): Promise<void> {
    return this.#write('mergeRead', read);
  }

  async lastSeq(): Promise<number> {
    return this.#read(() => this.#statements.lastSeq.get()?.seq ?? 0);
  }

  claimIdempotency(ownerHash: string, idempotencyKey: string, fingerprint: string): Promise<IdempotencyClaim> {
    return this.#write('claim', ownerHash, idempotencyKey, fingerprint);
  }

  markIdempotencyUnknown(ownerHash: string, idempotencyKey: string): Promise<IdempotencyClaim> {
    return this.#write('markUnknown', ownerHash, idempotencyKey);
  }

  resolveBookingMarker(marker: string, result: BookingResult): Promise<string | undefined> {
    return this.#write('resolveMarker', marker, result);
  }

  completeIdempotency(ownerHash: string, idempotencyKey: string, result: BookingResult): Promise<void> {
    return this.#write('complete', ownerHash, idempotencyKey, result);
  }

  releaseIdempotency(ownerHash: string, idempotencyKey: string): Promise<void> {
    return this.#write('release', ownerHash, idempotencyKey);
  }

  recordOwner(uid: string, owner: string, group?: OwnerGroup, proof?: OwnerProof): Promise<void> {
    return this.#writeOwners([{ uid, owner, group: group ?? null, proof }]);
  }

  recordOwners(records: readonly OwnerEntry[]): Promise<void> {
    return this.#writeOwners(records);
  }

  async ownerOf(uid: string): Promise<string | undefined> {
    return (await this.ownersOf([uid])).get(uid)?.owner;
  }

  async ownersOf(uids: readonly string[]): Promise<Map<string, OwnerRecord>> {
    // Past the retention a record is gone, whether or not a trim pass has deleted it yet.
    const since = this.#retention ? Date.now() - this.#retention.eventRetentionMs : -Infinity;
    const found = new Map<string, OwnerRecord>();
    for (const uid of uids) {
      const row = this.#read(() => this.#statements.getOwner.get(uid, since));
      const stored: OwnerRecord | undefined = row && {
        owner: row.owner_hash,
        group: ownerGroup(row.api_group),
        proof: ownerProof(row.proof),
      };
      // Sent, not committed yet: a read after the write finds it, as on Redis (commands run in order).
      const sending = this.#ownersInFlight.get(uid)?.record;
      const record = sending && (!stored || supersedes(sending, stored)) ? sending : stored;
      if (record) found.set(uid, record);
    }
    return found;
  }

  async merchantLinks(ids: readonly string[]): Promise<Map<string, string>> {
    const found = new Map<string, string>();
    for (const id of ids) {
      const row = this.#read(() => this.#statements.getLink.get(id));
      if (row) found.set(id, row.merchant);
    }
    return found;
  }

  linkMerchant(key: string, previous: string): Promise<MerchantLink> {
    return this.#write('link', key, previous);
  }

  mergeMerchant(from: string, into: string): Promise<MerchantMerge> {
    return this.#write('merge', from, into);
  }

  unlinkMerchant(id: string): Promise<boolean> {
    return this.#write('unlink', id);
  }

  /**
   * Looks at up to UNFINISHED_SCAN records per page through the (owner_hash,
   * created_at, uid) index, finished ones included: a page may come back short.
   * The cursor is the last record looked at, as "<created_at> <uid>".
   */
  async unfinishedDeliveries(
    owner: string,
    after: string | undefined,
    { limit, since }: { limit: number; since: number },
  ): Promise<UnfinishedPage> {
    const space = after?.indexOf(' ') ?? -1;
    // Before every record (created_at is never negative), or after the one the cursor names.
    const fromTime = space > 0 ? Number(after!.slice(0, space)) : -1;
    const fromUid = space > 0 ? after!.slice(space + 1) : '';
    const scan = Math.max(limit, UNFINISHED_SCAN);
    const rows = this.#read(() => this.#statements.ownedAfter.all(owner, since, fromTime, fromTime, fromUid, scan));
    const deliveries: UnfinishedDelivery[] = [];
    for (const row of rows) {
      if (row.terminal === 1) continue;
      deliveries.push({ uid: row.uid, group: ownerGroup(row.api_group) });
      if (deliveries.length === limit) return { deliveries, next: cursorOf(row) };
    }
    const last = rows.at(-1);
    return { deliveries, next: rows.length === scan && last ? cursorOf(last) : undefined };
  }

  /** One process holds the file (data-dir-lock.ts): nobody else to share reads with. */
  async leaseReads(leases: readonly string[], _forMs?: number): Promise<Set<string>> {
    return new Set(leases);
  }

  async releaseReads(_leases: readonly string[]): Promise<void> {}

  async ownerClaimsAfter(_after: number | undefined): Promise<OwnerClaims> {
    return { version: 0, uids: [] };
  }

  async cursorSecret(): Promise<Buffer> {
    // Created once per file (the writer keeps the first); every later start reads the same one.
    this.#cursorSecret ??= Buffer.from(await this.#write('cursorSecret'));
    return this.#cursorSecret;
  }

  /** Deletes now what is past its retention (a timer does it every interval); never two passes at once. */
  trimExpired(): Promise<void> {
    return this.#trims?.run() ?? Promise.resolve();
  }

  /**
   * One trim pass, in steps of at most TRIM_BATCH rows, each its own short
   * transaction on the writer thread: writes sent meanwhile go between two steps.
   */
  async #trim(stopping: () => boolean): Promise<void> {
    const phases: TrimPhase[] = ['log', 'records', 'vacuum'];
    for (const phase of phases) {
      for (;;) {
        if (stopping()) return;
        if (!(await this.#write('trim', phase))) break;
        await yieldToEventLoop();
      }
    }
  }

  /**
   * A read here and a real write (one row, one fsync) on the writer thread: a
   * closed connection, a read-only file, a full disk or a stopped thread fails it.
   */
  async ping(): Promise<void> {
    if (this.#damage) throw new Error(this.#damage);
    this.#statements.ping.get();
    await this.#write('ping');
  }

  /**
   * Stops the trim schedule (waiting for a pass in progress), lets the writes sent so far commit, then closes the file.
   */
  async close(): Promise<void> {
    await this.#trims?.stop();
    if (!this.#closed) {
      this.#closed = true;
      // Answered after every write sent before it; a thread that stopped has nothing left to close.
      await this.#thread.call('close').catch(() => undefined);
      await this.#thread.release();
    }
    if (this.db.open) this.db.close();
    this.#lock.release();
  }
}

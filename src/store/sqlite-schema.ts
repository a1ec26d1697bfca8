// The SQLite store's file: opened under its lock and checked, its tables and the columns earlier versions lacked, and
// the statements the main thread reads with (the writer thread prepares its own: sqlite-writer.ts).
import { existsSync, mkdirSync } from 'node:fs';
import path from 'node:path';
import Database from 'better-sqlite3';
import type { Logger } from '../logger.js';
import { bookingMarker } from '../domain/booking-marker.js';
import { lockDataDir, type DataDirLock } from './data-dir-lock.js';
import { checkStoreFile } from './sqlite-file.js';
import type { EventRow } from './sqlite-writer.js';

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

/** Opens the store's file under `dataDir`, locked to this process and checked before anything is written to it. */
export function openStoreFile(
  dataDir: string,
  fileName: string | undefined,
  logger: Logger | undefined,
): { db: Database.Database; lock: DataDirLock } {
  mkdirSync(dataDir, { recursive: true });
  const file = path.join(dataDir, fileName ?? 'delivery-graph.sqlite');
  // Before the file is opened: a second process stops here, having changed nothing.
  const lock = lockDataDir(dataDir, file);
  try {
    const created = !existsSync(file);
    const db = new Database(file);
    try {
      // First: the writer thread of another store on this file may hold it a moment.
      db.pragma('busy_timeout = 5000');
      // Before anything is written to it: a damaged or emptied file stops the start, unchanged.
      checkStoreFile(db, { created, heldBefore: lock.existed, lockFile: lock.file }, logger);
    } catch (error) {
      db.close();
      throw error;
    }
    return { db, lock };
  } catch (error) {
    lock.release();
    throw error;
  }
}

/** The tables and indexes, and the columns a file from an earlier version lacks. */
export function prepareSchema(db: Database.Database): void {
  // Takes effect on a new file only (before its first table); a file created before keeps
  // auto_vacuum = NONE: its freed pages are reused by new rows, but the file does not shrink.
  db.pragma('auto_vacuum = INCREMENTAL');
  db.pragma('journal_mode = WAL');
  db.pragma('synchronous = FULL');
  upgradeIdempotencyTable(db);
  db.exec(`
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
    -- When a read last confirmed each delivery's view, and whether it settled it (a final state): reads from the view.
    CREATE TABLE IF NOT EXISTS read_confirmations (uid TEXT PRIMARY KEY, read_at INTEGER NOT NULL, settled INTEGER NOT NULL);
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
    CREATE INDEX IF NOT EXISTS read_confirmations_by_time ON read_confirmations (read_at);
    -- Reconciliation pages through each owner's recent records (unfinishedDeliveries).
    CREATE INDEX IF NOT EXISTS ownership_by_owner ON ownership (owner_hash, created_at, uid);
    -- Whether ids are linked to a merchant (its history: linkMerchant), and which (mergeMerchant).
    CREATE INDEX IF NOT EXISTS merchant_links_by_merchant ON merchant_links (merchant);
  `);
  // A file made before groups were kept gains the column; its records read with no group.
  const ownershipColumns = db.prepare<[], { name: string }>("SELECT name FROM pragma_table_info('ownership')").all();
  if (!ownershipColumns.some((column) => column.name === 'api_group'))
    db.exec('ALTER TABLE ownership ADD COLUMN api_group TEXT');
  // A file made before proofs were kept: its records read with none, which counts as a read (src/store/store.ts,
  // OwnerProof).
  if (!ownershipColumns.some((column) => column.name === 'proof'))
    db.exec('ALTER TABLE ownership ADD COLUMN proof TEXT');
  // A record's retention counts from its last proof (proved_at; created_at stays when it was made): a file from
  // before counts from the making. The retention finds expired records by it.
  if (!ownershipColumns.some((column) => column.name === 'proved_at'))
    db.exec('ALTER TABLE ownership ADD COLUMN proved_at INTEGER; UPDATE ownership SET proved_at = created_at;');
  db.exec(
    'CREATE INDEX IF NOT EXISTS ownership_by_proof ON ownership (proved_at); DROP INDEX IF EXISTS ownership_by_time;',
  );
  // A file made before couriers were kept: its states gain the columns, empty (no courier known yet).
  const stateColumns = new Set(
    db
      .prepare<[], { name: string }>('PRAGMA table_info(delivery_state)')
      .all()
      .map((column) => column.name),
  );
  if (!stateColumns.has('courier'))
    db.exec(
      'ALTER TABLE delivery_state ADD COLUMN courier TEXT; ALTER TABLE delivery_state ADD COLUMN former_couriers TEXT;',
    );
  // A file made before evidence and views were kept: no pickup proven yet, an empty view, nothing carried over.
  if (!stateColumns.has('picked_up'))
    db.exec(
      'ALTER TABLE delivery_state ADD COLUMN picked_up INTEGER; ALTER TABLE delivery_state ADD COLUMN view TEXT;',
    );
  const eventColumns = new Set(
    db
      .prepare<[], { name: string }>('PRAGMA table_info(events)')
      .all()
      .map((column) => column.name),
  );
  if (!eventColumns.has('carried')) db.exec('ALTER TABLE events ADD COLUMN carried TEXT;');
}

/** A delivery's milestone state as the main thread reads it. */
export interface StateRow {
  rank: number;
  terminal: number;
  seq: number;
  courier: string | null;
  former_couriers: string | null;
  picked_up: number | null;
}

/** The main thread's reads. */
export function readStatements(db: Database.Database) {
  return {
    getOwner: db.prepare<[string, number], { owner_hash: string; api_group: string | null; proof: string | null }>(
      'SELECT owner_hash, api_group, proof FROM ownership WHERE uid = ? AND proved_at >= ?',
    ),
    getLink: db.prepare<[string], { merchant: string }>('SELECT merchant FROM merchant_links WHERE id = ?'),
    getState: db.prepare<[string], StateRow>(
      'SELECT rank, terminal, seq, courier, former_couriers, picked_up FROM delivery_state WHERE uid = ?',
    ),
    getView: db.prepare<[string], { view: string | null }>('SELECT view FROM delivery_state WHERE uid = ?'),
    // A view (the state's, else a read's before any state) with its confirmations: the newest read, and the newest
    // event that is not stale.
    confirmedView: db.prepare<
      [string],
      { view: string | null; read_at: number | null; settled: number | null; event_at: string | null }
    >(
      `SELECT coalesce(d.view, r.view) AS view, c.read_at, c.settled,
         (SELECT received_at FROM events e WHERE e.uid = u.uid AND (e.stale & 1) = 0 ORDER BY e.seq DESC LIMIT 1) AS event_at
       FROM (SELECT ? AS uid) u LEFT JOIN delivery_state d ON d.uid = u.uid LEFT JOIN read_views r ON r.uid = u.uid
         LEFT JOIN read_confirmations c ON c.uid = u.uid`,
    ),
    eventsAfter: db.prepare<[number, number], EventRow>('SELECT * FROM events WHERE seq > ? ORDER BY seq LIMIT ?'),
    eventsOfUidAfter: db.prepare<[string, number, number], EventRow>(
      'SELECT * FROM events WHERE uid = ? AND seq > ? ORDER BY seq LIMIT ?',
    ),
    latestDelivery: db.prepare<[string], EventRow>(
      "SELECT * FROM events WHERE uid = ? AND (stale & 1) = 0 AND name LIKE 'delivery.%' ORDER BY seq DESC LIMIT 1",
    ),
    latestLocation: db.prepare<[string], EventRow>(
      "SELECT * FROM events WHERE uid = ? AND (stale & 1) = 0 AND json_extract(payload, '$.driver_location.lat') IS NOT NULL ORDER BY seq DESC LIMIT 1",
    ),
    // The highest seq ever given (AUTOINCREMENT's record), which trimming the log does not lower.
    lastSeq: db.prepare<[], { seq: number }>("SELECT seq FROM sqlite_sequence WHERE name = 'events'"),
    ping: db.prepare('SELECT 1'),
    // An owner's records from a (created_at, uid) position on, with the state of each delivery, if any.
    ownedAfter: db.prepare<
      [string, number, number, number, string, number],
      { uid: string; api_group: string | null; created_at: number; terminal: number | null }
    >(
      `SELECT o.uid, o.api_group, o.created_at, d.terminal FROM ownership o LEFT JOIN delivery_state d ON d.uid = o.uid
       WHERE o.owner_hash = ? AND o.created_at >= ? AND (o.created_at > ? OR (o.created_at = ? AND o.uid > ?))
       ORDER BY o.created_at, o.uid LIMIT ?`,
    ),
  };
}

export type ReadStatements = ReturnType<typeof readStatements>;

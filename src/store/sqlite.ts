// The embedded store: one SQLite file under DATA_DIR, in WAL mode with full
// fsync, so that what it acknowledged survives a kill -9 and a power cut.
// With a retention, a timer deletes what expired in small transactions and
// hands the freed pages back to the file system a few at a time (#trim).
import { randomBytes } from 'node:crypto';
import { mkdirSync } from 'node:fs';
import path from 'node:path';
import Database from 'better-sqlite3';
import type { Logger } from '../logger.js';
import type { WireWebhookEvent } from '../upstream/wire.js';
import { courierIdentity, transition, type MilestoneState } from '../domain/milestones.js';
import { TRIM_BATCH, TrimSchedule, trimIntervalMs, yieldToEventLoop, type Retention } from './retention.js';
import {
  PartialAppendError,
  PENDING_EXPIRY_MS,
  courierJson,
  courierPart,
  formerCouriersJson,
  type AppendResult,
  type BookingResult,
  type DeliveryState,
  type EventFilter,
  type IdempotencyClaim,
  type OwnerEntry,
  type OwnerGroup,
  type OwnerRecord,
  type Store,
  type StoredEvent,
} from './store.js';
import { bookingMarker } from '../domain/booking-marker.js';
import { lockDataDir, type DataDirLock } from './data-dir-lock.js';
import { UidFilter } from './uid-filter.js';
import { fingerprint } from '../domain/canonical-json.js';

interface EventRow {
  seq: number;
  uid: string;
  name: string;
  status_text: string | null;
  received_at: string;
  /** 0 accepted, 1 stale, 2 accepted for its courier only (StoredEvent.courierOnly). */
  stale: number;
  payload: string;
}

function toStored(row: EventRow): StoredEvent {
  return {
    seq: row.seq,
    uid: row.uid,
    name: row.name,
    statusText: row.status_text,
    receivedAt: row.received_at,
    stale: row.stale === 1,
    courierOnly: row.stale === 2,
    payload: JSON.parse(row.payload) as WireWebhookEvent,
  };
}

interface StateRow {
  rank: number;
  terminal: number;
  seq: number;
  courier: string | null;
  former_couriers: string | null;
}

const stateOf = (row: StateRow): MilestoneState => ({ rank: row.rank, terminal: row.terminal === 1, ...courierPart(row.courier, row.former_couriers) });

export interface SqliteStoreOptions {
  fileName?: string;
  /** Delete what is older than this, on a timer; without it nothing is ever deleted. */
  retention?: Retention;
  logger?: Logger;
}

/** auto_vacuum = INCREMENTAL: freed pages can be given back to the file system a few at a time. */
const INCREMENTAL_VACUUM = 2;
/** Pages one incremental vacuum step gives back (1 MiB of 4 KiB pages, a few ms of I/O). */
const VACUUM_STEP_PAGES = 256;
/** Free pages kept for the next inserts: a quarter of the file, at least 4 MiB; only the excess is given back. */
const ownerGroup = (value: string | null): OwnerGroup | null => (value === 'PLATFORM' || value === 'PARTNER' ? value : null);

const freePagesKept = (pages: number) => Math.max(1024, Math.floor(pages / 4));

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
  const table = db.prepare<[], { sql: string }>("SELECT sql FROM sqlite_master WHERE type = 'table' AND name = 'idempotency'").get();
  if (!table || table.sql.includes("'unknown'")) return;
  db.transaction(() => {
    db.exec(`CREATE TABLE idempotency_upgraded (${IDEMPOTENCY_COLUMNS});`);
    const rows = db.prepare<[], { owner_hash: string; idempotency_key: string }>('SELECT owner_hash, idempotency_key FROM idempotency').all();
    db.exec('INSERT INTO idempotency_upgraded (owner_hash, idempotency_key, fingerprint, state, uid, tracking_url, updated_at) SELECT owner_hash, idempotency_key, fingerprint, state, uid, tracking_url, updated_at FROM idempotency');
    const mark = db.prepare('UPDATE idempotency_upgraded SET marker = ? WHERE owner_hash = ? AND idempotency_key = ?');
    for (const row of rows) mark.run(bookingMarker(row.owner_hash, row.idempotency_key), row.owner_hash, row.idempotency_key);
    db.exec('DROP TABLE idempotency; ALTER TABLE idempotency_upgraded RENAME TO idempotency;');
  }).immediate();
}

function claimOf(row: { state: string; uid: string | null; tracking_url: string | null; updated_at: number }): IdempotencyClaim {
  if (row.state === 'done') return { state: 'done', result: { uid: row.uid!, trackingUrl: row.tracking_url } };
  if (row.state === 'unknown') return { state: 'unknown', since: new Date(row.updated_at) };
  return { state: 'pending' };
}

/** The owner filter's size bounds, in uids (UidFilter: 10 bits each; the largest is 8 MiB), and the uids read per turn while it is filled. */
const OWNER_FILTER_MIN = 1 << 16;
const OWNER_FILTER_MAX = Math.floor((8 * 1024 * 1024 * 8) / 10);
const OWNER_FILTER_SLICE = 20_000;

export class SqliteStore implements Store {
  readonly db: Database.Database;
  readonly #statements;
  readonly #retention: Retention | undefined;
  readonly #trims: TrimSchedule | undefined;
  #cursorSecret: Buffer | undefined;
  readonly #appendOne: (event: { payload: WireWebhookEvent; receivedAt: string }) => AppendResult;
  readonly #lock: DataDirLock;
  readonly #logger: Logger | undefined;
  /** The uids with an owner record (uid-filter.ts); consulted once `complete`, i.e. once it has read every record of the file. */
  #ownerFilter = { filter: new UidFilter(OWNER_FILTER_MIN), complete: false };
  /** A larger filter being filled from the file while the current one stays in use. */
  #nextOwnerFilter: UidFilter | undefined;

  constructor(dataDir: string, options: SqliteStoreOptions = {}) {
    mkdirSync(dataDir, { recursive: true });
    const file = path.join(dataDir, options.fileName ?? 'delivery-graph.sqlite');
    // Before the file is opened: a second process stops here, having changed nothing.
    this.#lock = lockDataDir(dataDir, file);
    try {
      this.db = new Database(file);
    } catch (error) {
      this.#lock.release();
      throw error;
    }
    // Takes effect on a new file only (before its first table); a file created before keeps
    // auto_vacuum = NONE: its freed pages are reused by new rows, but the file does not shrink.
    this.db.pragma('auto_vacuum = INCREMENTAL');
    this.db.pragma('journal_mode = WAL');
    this.db.pragma('synchronous = FULL');
    this.db.pragma('busy_timeout = 5000');
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
        payload TEXT NOT NULL
      );
      CREATE UNIQUE INDEX IF NOT EXISTS events_dedup ON events (uid, name, hash);
      CREATE INDEX IF NOT EXISTS events_by_uid ON events (uid, seq);
      CREATE TABLE IF NOT EXISTS delivery_state (
        uid TEXT PRIMARY KEY,
        rank REAL NOT NULL,
        terminal INTEGER NOT NULL,
        seq INTEGER NOT NULL,
        courier TEXT,
        former_couriers TEXT
      );
      CREATE TABLE IF NOT EXISTS ownership (
        uid TEXT PRIMARY KEY,
        owner_hash TEXT NOT NULL,
        created_at INTEGER NOT NULL,
        api_group TEXT
      );
      CREATE TABLE IF NOT EXISTS readiness (id INTEGER PRIMARY KEY CHECK (id = 1), checked_at INTEGER NOT NULL);
      CREATE TABLE IF NOT EXISTS meta (name TEXT PRIMARY KEY, value BLOB NOT NULL);
      -- For the retention: expired ownership and idempotency rows are found by time.
      CREATE INDEX IF NOT EXISTS idempotency_by_time ON idempotency (updated_at);
      -- A webhook's booking marker finds its claim.
      CREATE INDEX IF NOT EXISTS idempotency_by_marker ON idempotency (marker);
      CREATE INDEX IF NOT EXISTS ownership_by_time ON ownership (created_at);
    `);
    // A file made before groups were kept gains the column; its records read with no group.
    const ownershipColumns = this.db.prepare<[], { name: string }>('SELECT name FROM pragma_table_info(\'ownership\')').all();
    if (!ownershipColumns.some((column) => column.name === 'api_group')) this.db.exec('ALTER TABLE ownership ADD COLUMN api_group TEXT');
    // A file made before couriers were kept: its states gain the columns, empty (no courier known yet).
    const stateColumns = new Set(this.db.prepare<[], { name: string }>('PRAGMA table_info(delivery_state)').all().map((column) => column.name));
    if (!stateColumns.has('courier')) this.db.exec('ALTER TABLE delivery_state ADD COLUMN courier TEXT; ALTER TABLE delivery_state ADD COLUMN former_couriers TEXT;');
    this.#retention = options.retention;
    // The first pass comes after one interval: statements are ready by then.
    this.#trims = options.retention && new TrimSchedule((stopping) => this.#trim(stopping), trimIntervalMs(options.retention), options.logger);
    this.#statements = {
      getIdem: this.db.prepare<[string, string], { fingerprint: string; state: string; uid: string | null; tracking_url: string | null; updated_at: number }>(
        'SELECT fingerprint, state, uid, tracking_url, updated_at FROM idempotency WHERE owner_hash = ? AND idempotency_key = ?',
      ),
      insertIdem: this.db.prepare(
        "INSERT INTO idempotency (owner_hash, idempotency_key, fingerprint, state, updated_at, marker) VALUES (?, ?, ?, 'pending', ?, ?)",
      ),
      unknownIdem: this.db.prepare("UPDATE idempotency SET state = 'unknown', updated_at = ? WHERE owner_hash = ? AND idempotency_key = ? AND state = 'pending'"),
      resolveIdem: this.db.prepare<[string, string | null, number, string], { owner_hash: string }>(
        "UPDATE idempotency SET state = 'done', uid = ?, tracking_url = ?, updated_at = ? WHERE marker = ? AND state IN ('pending', 'unknown') RETURNING owner_hash",
      ),
      completeIdem: this.db.prepare(
        "UPDATE idempotency SET state = 'done', uid = ?, tracking_url = ?, updated_at = ? WHERE owner_hash = ? AND idempotency_key = ?",
      ),
      deleteIdem: this.db.prepare("DELETE FROM idempotency WHERE owner_hash = ? AND idempotency_key = ? AND state IN ('pending', 'unknown')"),
      insertOwner: this.db.prepare('INSERT OR IGNORE INTO ownership (uid, owner_hash, created_at, api_group) VALUES (?, ?, ?, ?)'),
      getOwner: this.db.prepare<[string, number], { owner_hash: string; api_group: string | null }>('SELECT owner_hash, api_group FROM ownership WHERE uid = ? AND created_at >= ?'),
      forgetIdem: this.db.prepare('DELETE FROM idempotency WHERE owner_hash = ? AND idempotency_key = ?'),
      findEvent: this.db.prepare<[string, string, string], EventRow>('SELECT * FROM events WHERE uid = ? AND name = ? AND hash = ?'),
      insertEvent: this.db.prepare(
        'INSERT INTO events (uid, name, hash, status_text, received_at, stale, payload) VALUES (?, ?, ?, ?, ?, ?, ?)',
      ),
      getState: this.db.prepare<[string], StateRow>('SELECT rank, terminal, seq, courier, former_couriers FROM delivery_state WHERE uid = ?'),
      putState: this.db.prepare(
        'INSERT INTO delivery_state (uid, rank, terminal, seq, courier, former_couriers) VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (uid) DO UPDATE SET rank = excluded.rank, terminal = excluded.terminal, seq = excluded.seq, courier = excluded.courier, former_couriers = excluded.former_couriers',
      ),
      // A courier change alone: the milestone, and the event that last moved it, stay.
      putCourier: this.db.prepare('UPDATE delivery_state SET courier = ?, former_couriers = ? WHERE uid = ?'),
      eventsAfter: this.db.prepare<[number, number], EventRow>('SELECT * FROM events WHERE seq > ? ORDER BY seq LIMIT ?'),
      eventsOfUidAfter: this.db.prepare<[string, number, number], EventRow>('SELECT * FROM events WHERE uid = ? AND seq > ? ORDER BY seq LIMIT ?'),
      latestDelivery: this.db.prepare<[string], EventRow>(
        "SELECT * FROM events WHERE uid = ? AND stale <> 1 AND name LIKE 'delivery.%' ORDER BY seq DESC LIMIT 1",
      ),
      latestLocation: this.db.prepare<[string], EventRow>(
        "SELECT * FROM events WHERE uid = ? AND stale <> 1 AND json_extract(payload, '$.driver_location.lat') IS NOT NULL ORDER BY seq DESC LIMIT 1",
      ),
      // The highest seq ever given (AUTOINCREMENT's record), which trimming the log does not lower.
      lastSeq: this.db.prepare<[], { seq: number }>("SELECT seq FROM sqlite_sequence WHERE name = 'events'"),
      getMeta: this.db.prepare<[string], { value: Buffer }>('SELECT value FROM meta WHERE name = ?'),
      putMetaOnce: this.db.prepare('INSERT OR IGNORE INTO meta (name, value) VALUES (?, ?)'),
      // The oldest events, without their payloads: the trim deletes the leading ones that expired.
      logHead: this.db.prepare<[number], { seq: number; received_at: string }>('SELECT seq, received_at FROM events ORDER BY seq LIMIT ?'),
      trimLog: this.db.prepare<[number], { uid: string }>('DELETE FROM events WHERE seq <= ? RETURNING uid'),
      // A delivery's state goes with its last event.
      forgetState: this.db.prepare('DELETE FROM delivery_state WHERE uid = ? AND NOT EXISTS (SELECT 1 FROM events WHERE uid = ?)'),
      trimOwners: this.db.prepare('DELETE FROM ownership WHERE rowid IN (SELECT rowid FROM ownership WHERE created_at < ? LIMIT ?)'),
      // A pending claim is its booking in flight: it goes only once it would have turned unknown anyway.
      trimIdem: this.db.prepare(
        "DELETE FROM idempotency WHERE rowid IN (SELECT rowid FROM idempotency WHERE updated_at < ? AND (state != 'pending' OR updated_at < ?) LIMIT ?)",
      ),
    };
    const s = this.#statements;
    // One event, ranked against what the batch already wrote, in a savepoint of its own (a nested
    // better-sqlite3 transaction inside appendEvents'): one that fails is undone alone and fails only itself.
    this.#appendOne = this.db.transaction(({ payload, receivedAt }: { payload: WireWebhookEvent; receivedAt: string }): AppendResult => {
      const hash = fingerprint(payload);
      const existing = s.findEvent.get(payload.uid, payload.event_name, hash);
      if (existing) return { event: toStored(existing), duplicate: true };
      const row = s.getState.get(payload.uid);
      const current: MilestoneState | undefined = row && stateOf(row);
      const { stale, courierOnly, state: next } = transition(current, payload.event_name, courierIdentity(payload));
      const statusText = typeof payload.status === 'string' ? payload.status : null;
      const info = s.insertEvent.run(payload.uid, payload.event_name, hash, statusText, receivedAt, stale ? 1 : courierOnly ? 2 : 0, JSON.stringify(payload));
      const seq = Number(info.lastInsertRowid);
      const courier = next?.courier ? courierJson(next.courier) : null;
      const formers = next?.formerCouriers ? formerCouriersJson(next.formerCouriers) : null;
      // Only an event that moved the milestone is written as its last mover.
      if (courierOnly) s.putCourier.run(courier, formers, payload.uid);
      else if (next && next !== current) s.putState.run(payload.uid, next.rank, next.terminal ? 1 : 0, seq, courier, formers);
      return { event: { seq, uid: payload.uid, name: payload.event_name, statusText, receivedAt, stale, courierOnly, payload }, duplicate: false };
    });
    this.#logger = options.logger;
    this.#startOwnerFilter();
  }

  /** A filter that cannot be filled (the file closed or failed meanwhile) leaves the file to answer every lookup: slower, never wrong. */
  #startOwnerFilter(): void {
    this.#rebuildOwnerFilter().catch((error: unknown) => {
      if (this.db.open) this.#logger?.warn({ err: error }, 'the owner filter could not be filled: owner lookups ask the file');
    });
  }

  /**
   * Fills a new owner filter, sized for twice the records the file holds, with
   * every uid that has one, a slice per turn of the event loop; then it is the
   * one in use (until then the current one, if complete, still answers).
   */
  async #rebuildOwnerFilter(): Promise<void> {
    const records = this.db.prepare<[], { n: number }>('SELECT count(*) AS n FROM ownership').get()!.n;
    const filter = new UidFilter(Math.min(OWNER_FILTER_MAX, Math.max(OWNER_FILTER_MIN, records * 2)));
    if (this.#ownerFilter.complete) this.#nextOwnerFilter = filter;
    else this.#ownerFilter = { filter, complete: false };
    const slice = this.db.prepare<[number], { rowid: number; uid: string }>(`SELECT rowid, uid FROM ownership WHERE rowid > ? ORDER BY rowid LIMIT ${OWNER_FILTER_SLICE}`);
    let after = 0;
    for (;;) {
      if (!this.db.open) return;
      const rows = slice.all(after);
      for (const row of rows) filter.add(row.uid);
      if (rows.length < OWNER_FILTER_SLICE) break;
      after = rows[rows.length - 1]!.rowid;
      await yieldToEventLoop();
    }
    this.#ownerFilter = { filter, complete: true };
    this.#nextOwnerFilter = undefined;
  }

  /** The owner filter in use, for tests and /metrics: its size, and whether it answers yet. */
  get ownerFilter(): { capacity: number; bytes: number; complete: boolean } {
    const { filter, complete } = this.#ownerFilter;
    return { capacity: filter.capacity, bytes: filter.bytes + (this.#nextOwnerFilter?.bytes ?? 0), complete };
  }

  /** Every record written goes into the filter first (and into the one being filled); a full one is replaced by a larger one, up to OWNER_FILTER_MAX. */
  #filterOwner(uid: string): void {
    this.#ownerFilter.filter.add(uid);
    this.#nextOwnerFilter?.add(uid);
    const { filter, complete } = this.#ownerFilter;
    if (complete && !this.#nextOwnerFilter && filter.added > filter.capacity && filter.capacity < OWNER_FILTER_MAX) this.#startOwnerFilter();
  }

  async appendEvents(events: ReadonlyArray<{ payload: WireWebhookEvent; receivedAt: string }>): Promise<AppendResult[]> {
    // One transaction for the batch (one fsync); each event in a savepoint of its own (see #appendOne).
    const outcomes = this.db
      .transaction(() =>
        events.map((event): AppendResult | Error => {
          try {
            return this.#appendOne(event);
          } catch (error) {
            // A failure of the transaction itself (disk full, I/O) is every event's: let it end the batch.
            if (!this.db.inTransaction) throw error;
            return error instanceof Error ? error : new Error(String(error));
          }
        }),
      )
      .immediate();
    if (outcomes.some((outcome) => outcome instanceof Error)) throw new PartialAppendError(outcomes);
    return outcomes as AppendResult[];
  }

  async eventsAfter(afterSeq: number, limit: number, filter: EventFilter = {}): Promise<StoredEvent[]> {
    const uids = filter.uids;
    let rows: EventRow[];
    if (uids && uids.length > 0) {
      // Per uid through the (uid, seq) index, then merged in log order.
      rows = uids.flatMap((uid) => this.#statements.eventsOfUidAfter.all(uid, afterSeq, limit));
      rows.sort((a, b) => a.seq - b.seq);
      rows = rows.slice(0, limit);
    } else {
      rows = this.#statements.eventsAfter.all(afterSeq, limit);
    }
    return rows.map(toStored);
  }

  async latestEvent(uid: string, kind: 'delivery' | 'location'): Promise<StoredEvent | undefined> {
    const row = kind === 'delivery' ? this.#statements.latestDelivery.get(uid) : this.#statements.latestLocation.get(uid);
    return row ? toStored(row) : undefined;
  }

  async deliveryState(uid: string): Promise<DeliveryState | undefined> {
    const row = this.#statements.getState.get(uid);
    return row ? { ...stateOf(row), seq: row.seq } : undefined;
  }

  async lastSeq(): Promise<number> {
    return this.#statements.lastSeq.get()?.seq ?? 0;
  }

  async claimIdempotency(ownerHash: string, idempotencyKey: string, fingerprint: string): Promise<IdempotencyClaim> {
    const s = this.#statements;
    // One transaction: the read and the insert cannot interleave with another claim.
    return this.db.transaction((): IdempotencyClaim => {
      let row = s.getIdem.get(ownerHash, idempotencyKey);
      const now = Date.now();
      // Past its retention a key is gone, whether or not a trim pass has deleted it yet.
      if (row && this.#retention && this.#idemExpired(row.state, row.updated_at, now)) {
        s.forgetIdem.run(ownerHash, idempotencyKey);
        row = undefined;
      }
      if (!row) {
        s.insertIdem.run(ownerHash, idempotencyKey, fingerprint, now, bookingMarker(ownerHash, idempotencyKey));
        return { state: 'claimed' };
      }
      if (row.fingerprint !== fingerprint) return { state: 'conflict' };
      if (row.state === 'pending' && now - row.updated_at > PENDING_EXPIRY_MS) {
        // Its process died mid-call: the booking may have been sent.
        s.unknownIdem.run(now, ownerHash, idempotencyKey);
        return { state: 'unknown', since: new Date(now) };
      }
      return claimOf(row);
    }).immediate();
  }

  async markIdempotencyUnknown(ownerHash: string, idempotencyKey: string): Promise<IdempotencyClaim> {
    const s = this.#statements;
    return this.db.transaction((): IdempotencyClaim => {
      s.unknownIdem.run(Date.now(), ownerHash, idempotencyKey);
      const row = s.getIdem.get(ownerHash, idempotencyKey);
      // Deleted meanwhile (its retention ended): nothing is known about it any more.
      return row ? claimOf(row) : { state: 'unknown', since: new Date() };
    }).immediate();
  }

  async resolveBookingMarker(marker: string, result: BookingResult): Promise<string | undefined> {
    return this.#statements.resolveIdem.get(result.uid, result.trackingUrl, Date.now(), marker)?.owner_hash;
  }

  async completeIdempotency(ownerHash: string, idempotencyKey: string, result: BookingResult): Promise<void> {
    this.#statements.completeIdem.run(result.uid, result.trackingUrl, Date.now(), ownerHash, idempotencyKey);
  }

  async releaseIdempotency(ownerHash: string, idempotencyKey: string): Promise<void> {
    this.#statements.deleteIdem.run(ownerHash, idempotencyKey);
  }

  async recordOwner(uid: string, ownerHash: string, group?: OwnerGroup): Promise<void> {
    this.#filterOwner(uid);
    this.#statements.insertOwner.run(uid, ownerHash, Date.now(), group ?? null);
  }

  async recordOwners(records: readonly OwnerEntry[]): Promise<void> {
    const now = Date.now();
    for (const record of records) this.#filterOwner(record.uid);
    // One transaction: one fsync for the lot.
    this.db.transaction(() => {
      for (const record of records) this.#statements.insertOwner.run(record.uid, record.owner, now, record.group);
    })();
  }

  async ownerOf(uid: string): Promise<string | undefined> {
    return (await this.ownersOf([uid])).get(uid)?.owner;
  }

  async ownersOf(uids: readonly string[]): Promise<Map<string, OwnerRecord>> {
    // Past the retention a record is gone, whether or not a trim pass has deleted it yet.
    const since = this.#retention ? Date.now() - this.#retention.eventRetentionMs : -Infinity;
    const found = new Map<string, OwnerRecord>();
    const { filter, complete } = this.#ownerFilter;
    for (const uid of uids) {
      // Never recorded: no need to ask the file.
      if (complete && !filter.mayHave(uid)) continue;
      const row = this.#statements.getOwner.get(uid, since);
      if (row) found.set(uid, { owner: row.owner_hash, group: ownerGroup(row.api_group) });
    }
    return found;
  }

  async cursorSecret(): Promise<Buffer> {
    if (!this.#cursorSecret) {
      // Created once per file; every later start reads the same one.
      this.#statements.putMetaOnce.run('cursor_secret', randomBytes(32));
      this.#cursorSecret = this.#statements.getMeta.get('cursor_secret')!.value;
    }
    return this.#cursorSecret;
  }

  /** Deletes now what is past its retention (a timer does it every interval); never two passes at once. */
  trimExpired(): Promise<void> {
    return this.#trims?.run() ?? Promise.resolve();
  }

  #idemExpired(state: string, updatedAt: number, now: number): boolean {
    const age = now - updatedAt;
    return age > this.#retention!.idempotencyRetentionMs && (state !== 'pending' || age > PENDING_EXPIRY_MS);
  }

  /**
   * One trim pass, in steps of at most TRIM_BATCH rows, each its own short
   * transaction, with the event loop free in between: better-sqlite3 blocks it
   * while a statement runs.
   */
  async #trim(stopping: () => boolean): Promise<void> {
    const s = this.#statements;
    const retention = this.#retention!;
    // The log in seq order, which is the order of arrival: only its leading expired events go.
    for (;;) {
      if (stopping()) return;
      const cutoff = Date.now() - retention.eventRetentionMs;
      let upTo = 0;
      for (const row of s.logHead.all(TRIM_BATCH)) {
        // A time that does not parse cannot be aged; it must not hold the log back either.
        if (Date.parse(row.received_at) >= cutoff) break;
        upTo = row.seq;
      }
      if (upTo === 0) break;
      this.db.transaction(() => {
        const uids = new Set(s.trimLog.all(upTo).map((row) => row.uid));
        for (const uid of uids) s.forgetState.run(uid, uid);
      }).immediate();
      await yieldToEventLoop();
    }
    for (;;) {
      if (stopping()) return;
      const now = Date.now();
      const owners = s.trimOwners.run(now - retention.eventRetentionMs, TRIM_BATCH).changes;
      const idem = s.trimIdem.run(now - retention.idempotencyRetentionMs, now - PENDING_EXPIRY_MS, TRIM_BATCH).changes;
      if (owners < TRIM_BATCH && idem < TRIM_BATCH) break;
      await yieldToEventLoop();
    }
    // Freed pages beyond what the next inserts will want go back to the file system, a step at a time.
    if (this.db.pragma('auto_vacuum', { simple: true }) !== INCREMENTAL_VACUUM) return;
    for (;;) {
      if (stopping()) return;
      const free = this.db.pragma('freelist_count', { simple: true }) as number;
      const pages = this.db.pragma('page_count', { simple: true }) as number;
      if (free <= freePagesKept(pages)) break;
      this.db.pragma(`incremental_vacuum(${Math.min(VACUUM_STEP_PAGES, free - freePagesKept(pages))})`);
      await yieldToEventLoop();
    }
  }

  /** A real write (one row, one fsync): a read-only file, a full disk or a closed connection fails it. */
  async ping(): Promise<void> {
    this.db.prepare('INSERT INTO readiness (id, checked_at) VALUES (1, ?) ON CONFLICT (id) DO UPDATE SET checked_at = excluded.checked_at').run(Date.now());
  }

  /** Stops the trim schedule (waiting for a pass in progress), then closes the file. */
  async close(): Promise<void> {
    await this.#trims?.stop();
    if (this.db.open) this.db.close();
    this.#lock.release();
  }
}

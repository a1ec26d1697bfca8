// The embedded store: one SQLite file under DATA_DIR, in WAL mode with full
// fsync, so that what it acknowledged survives a kill -9 and a power cut.
import { createHash } from 'node:crypto';
import { mkdirSync } from 'node:fs';
import path from 'node:path';
import Database from 'better-sqlite3';
import type { WireWebhookEvent } from '../upstream/wire.js';
import { transition, type MilestoneState } from '../domain/milestones.js';
import {
  canonicalJson,
  PENDING_EXPIRY_MS,
  type AppendResult,
  type BookingResult,
  type DeliveryState,
  type EventFilter,
  type IdempotencyClaim,
  type Store,
  type StoredEvent,
} from './store.js';

interface EventRow {
  seq: number;
  uid: string;
  name: string;
  status_text: string | null;
  received_at: string;
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
    payload: JSON.parse(row.payload) as WireWebhookEvent,
  };
}

export class SqliteStore implements Store {
  readonly db: Database.Database;
  readonly #statements;

  constructor(dataDir: string, fileName = 'delivery-graph.sqlite') {
    mkdirSync(dataDir, { recursive: true });
    this.db = new Database(path.join(dataDir, fileName));
    this.db.pragma('journal_mode = WAL');
    this.db.pragma('synchronous = FULL');
    this.db.pragma('busy_timeout = 5000');
    this.db.exec(`
      CREATE TABLE IF NOT EXISTS idempotency (
        owner_hash TEXT NOT NULL,
        idempotency_key TEXT NOT NULL,
        fingerprint TEXT NOT NULL,
        state TEXT NOT NULL CHECK (state IN ('pending', 'done')),
        uid TEXT,
        tracking_url TEXT,
        updated_at INTEGER NOT NULL,
        PRIMARY KEY (owner_hash, idempotency_key)
      );
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
        seq INTEGER NOT NULL
      );
      CREATE TABLE IF NOT EXISTS ownership (
        uid TEXT PRIMARY KEY,
        owner_hash TEXT NOT NULL,
        created_at INTEGER NOT NULL
      );
      CREATE TABLE IF NOT EXISTS readiness (id INTEGER PRIMARY KEY CHECK (id = 1), checked_at INTEGER NOT NULL);
    `);
    this.#statements = {
      getIdem: this.db.prepare<[string, string], { fingerprint: string; state: string; uid: string | null; tracking_url: string | null; updated_at: number }>(
        'SELECT fingerprint, state, uid, tracking_url, updated_at FROM idempotency WHERE owner_hash = ? AND idempotency_key = ?',
      ),
      insertIdem: this.db.prepare(
        "INSERT INTO idempotency (owner_hash, idempotency_key, fingerprint, state, updated_at) VALUES (?, ?, ?, 'pending', ?)",
      ),
      reclaimIdem: this.db.prepare("UPDATE idempotency SET updated_at = ? WHERE owner_hash = ? AND idempotency_key = ? AND state = 'pending'"),
      completeIdem: this.db.prepare(
        "UPDATE idempotency SET state = 'done', uid = ?, tracking_url = ?, updated_at = ? WHERE owner_hash = ? AND idempotency_key = ?",
      ),
      deleteIdem: this.db.prepare("DELETE FROM idempotency WHERE owner_hash = ? AND idempotency_key = ? AND state = 'pending'"),
      insertOwner: this.db.prepare('INSERT OR IGNORE INTO ownership (uid, owner_hash, created_at) VALUES (?, ?, ?)'),
      getOwner: this.db.prepare<[string], { owner_hash: string }>('SELECT owner_hash FROM ownership WHERE uid = ?'),
      findEvent: this.db.prepare<[string, string, string], EventRow>('SELECT * FROM events WHERE uid = ? AND name = ? AND hash = ?'),
      insertEvent: this.db.prepare(
        'INSERT INTO events (uid, name, hash, status_text, received_at, stale, payload) VALUES (?, ?, ?, ?, ?, ?, ?)',
      ),
      getState: this.db.prepare<[string], { rank: number; terminal: number; seq: number }>('SELECT rank, terminal, seq FROM delivery_state WHERE uid = ?'),
      putState: this.db.prepare(
        'INSERT INTO delivery_state (uid, rank, terminal, seq) VALUES (?, ?, ?, ?) ON CONFLICT (uid) DO UPDATE SET rank = excluded.rank, terminal = excluded.terminal, seq = excluded.seq',
      ),
      eventsAfter: this.db.prepare<[number, number], EventRow>('SELECT * FROM events WHERE seq > ? ORDER BY seq LIMIT ?'),
      eventsOfUidAfter: this.db.prepare<[string, number, number], EventRow>('SELECT * FROM events WHERE uid = ? AND seq > ? ORDER BY seq LIMIT ?'),
      latestDelivery: this.db.prepare<[string], EventRow>(
        "SELECT * FROM events WHERE uid = ? AND stale = 0 AND name LIKE 'delivery.%' ORDER BY seq DESC LIMIT 1",
      ),
      latestLocation: this.db.prepare<[string], EventRow>(
        "SELECT * FROM events WHERE uid = ? AND stale = 0 AND json_extract(payload, '$.driver_location.lat') IS NOT NULL ORDER BY seq DESC LIMIT 1",
      ),
      lastSeq: this.db.prepare<[], { seq: number | null }>('SELECT MAX(seq) AS seq FROM events'),
    };
  }

  async appendEvents(events: ReadonlyArray<{ payload: WireWebhookEvent; receivedAt: string }>): Promise<AppendResult[]> {
    const s = this.#statements;
    // One transaction for the batch: one fsync, and ranks compared against what
    // the same batch already wrote.
    return this.db.transaction(() =>
      events.map(({ payload, receivedAt }): AppendResult => {
        const hash = createHash('sha256').update(canonicalJson(payload)).digest('hex');
        const existing = s.findEvent.get(payload.uid, payload.event_name, hash);
        if (existing) return { event: toStored(existing), duplicate: true };
        const row = s.getState.get(payload.uid);
        const current: MilestoneState | undefined = row ? { rank: row.rank, terminal: row.terminal === 1 } : undefined;
        const { stale, state: next } = transition(current, payload.event_name);
        const statusText = typeof payload.status === 'string' ? payload.status : null;
        const info = s.insertEvent.run(payload.uid, payload.event_name, hash, statusText, receivedAt, stale ? 1 : 0, JSON.stringify(payload));
        const seq = Number(info.lastInsertRowid);
        // Only an event that moved the state is written as its last mover.
        if (next && next !== current) s.putState.run(payload.uid, next.rank, next.terminal ? 1 : 0, seq);
        return { event: { seq, uid: payload.uid, name: payload.event_name, statusText, receivedAt, stale, payload }, duplicate: false };
      }),
    ).immediate();
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
    return row ? { rank: row.rank, terminal: row.terminal === 1, seq: row.seq } : undefined;
  }

  async lastSeq(): Promise<number> {
    return this.#statements.lastSeq.get()?.seq ?? 0;
  }

  async claimIdempotency(ownerHash: string, idempotencyKey: string, fingerprint: string): Promise<IdempotencyClaim> {
    const s = this.#statements;
    // One transaction: the read and the insert cannot interleave with another claim.
    return this.db.transaction((): IdempotencyClaim => {
      const row = s.getIdem.get(ownerHash, idempotencyKey);
      const now = Date.now();
      if (!row) {
        s.insertIdem.run(ownerHash, idempotencyKey, fingerprint, now);
        return { state: 'claimed' };
      }
      if (row.fingerprint !== fingerprint) return { state: 'conflict' };
      if (row.state === 'done') return { state: 'done', result: { uid: row.uid!, trackingUrl: row.tracking_url } };
      if (now - row.updated_at > PENDING_EXPIRY_MS) {
        s.reclaimIdem.run(now, ownerHash, idempotencyKey);
        return { state: 'claimed' };
      }
      return { state: 'pending' };
    }).immediate();
  }

  async completeIdempotency(ownerHash: string, idempotencyKey: string, result: BookingResult): Promise<void> {
    this.#statements.completeIdem.run(result.uid, result.trackingUrl, Date.now(), ownerHash, idempotencyKey);
  }

  async releaseIdempotency(ownerHash: string, idempotencyKey: string): Promise<void> {
    this.#statements.deleteIdem.run(ownerHash, idempotencyKey);
  }

  async recordOwner(uid: string, ownerHash: string): Promise<void> {
    this.#statements.insertOwner.run(uid, ownerHash, Date.now());
  }

  async ownerOf(uid: string): Promise<string | undefined> {
    return this.#statements.getOwner.get(uid)?.owner_hash;
  }

  /** A real write (one row, one fsync): a read-only file, a full disk or a closed connection fails it. */
  async ping(): Promise<void> {
    this.db.prepare('INSERT INTO readiness (id, checked_at) VALUES (1, ?) ON CONFLICT (id) DO UPDATE SET checked_at = excluded.checked_at').run(Date.now());
  }

  async close(): Promise<void> {
    if (this.db.open) this.db.close();
  }
}

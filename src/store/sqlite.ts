// The embedded store: one SQLite file under DATA_DIR, in WAL mode with full
// fsync, so that what it acknowledged survives a kill -9 and a power cut.
import { mkdirSync } from 'node:fs';
import path from 'node:path';
import Database from 'better-sqlite3';
import type { BookingResult, IdempotencyClaim, Store } from './store.js';

/** A booking left pending this long (its process died mid-call) may be claimed again. */
const PENDING_EXPIRY_MS = 120_000;

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
      CREATE TABLE IF NOT EXISTS ownership (
        uid TEXT PRIMARY KEY,
        owner_hash TEXT NOT NULL,
        created_at INTEGER NOT NULL
      );
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
    };
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

  async close(): Promise<void> {
    if (this.db.open) this.db.close();
  }
}

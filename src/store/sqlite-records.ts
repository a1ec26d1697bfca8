// The SQLite writer thread's other writes (sqlite-writer.ts): idempotency
// claims, owner records, merchant links, the cursor secret, readiness, and the
// retention's trim steps.
import { randomBytes } from 'node:crypto';
import type Database from 'better-sqlite3';
import { bookingMarker } from '../domain/booking-marker.js';
import { TRIM_BATCH, type Retention } from './retention.js';
import { PENDING_EXPIRY_MS, supersedes, type IdempotencyClaim, type MerchantMerge, type OwnerProof } from './store.js';
import type { WriterOps } from './sqlite-writer.js';

/** The writes of this file, by the names WriterOps gives them. */
export type RecordOps = Omit<WriterOps, 'open' | 'append' | 'mergeRead' | 'close'>;

/** auto_vacuum = INCREMENTAL: freed pages can be given back to the file system a few at a time. */
const INCREMENTAL_VACUUM = 2;
/** Pages one incremental vacuum step gives back (1 MiB of 4 KiB pages, a few ms of I/O). */
const VACUUM_STEP_PAGES = 256;
/** Free pages kept for the next inserts: a quarter of the file, at least 4 MiB; only the excess is given back. */
const freePagesKept = (pages: number) => Math.max(1024, Math.floor(pages / 4));

/**
 * Links followed at most, looking for a merchant's root (a chain is one step per rotation, and link() keeps it one step
 * long).
 */
const MAX_LINK_DEPTH = 16;

type ClaimRow = { state: string; uid: string | null; tracking_url: string | null; updated_at: number };
function claimOf(row: ClaimRow): IdempotencyClaim {
  if (row.state === 'done') return { state: 'done', result: { uid: row.uid!, trackingUrl: row.tracking_url } };
  if (row.state === 'unknown') return { state: 'unknown', since: new Date(row.updated_at) };
  return { state: 'pending' };
}

function prepare(db: Database.Database) {
  return {
    getIdem: db.prepare<
      [string, string],
      { fingerprint: string; state: string; uid: string | null; tracking_url: string | null; updated_at: number }
    >(
      'SELECT fingerprint, state, uid, tracking_url, updated_at FROM idempotency WHERE owner_hash = ? AND idempotency_key = ?',
    ),
    insertIdem: db.prepare(
      "INSERT INTO idempotency (owner_hash, idempotency_key, fingerprint, state, updated_at, marker) VALUES (?, ?, ?, 'pending', ?, ?)",
    ),
    unknownIdem: db.prepare(
      "UPDATE idempotency SET state = 'unknown', updated_at = ? WHERE owner_hash = ? AND idempotency_key = ? AND state = 'pending'",
    ),
    resolveIdem: db.prepare<[string, string | null, number, string], { owner_hash: string }>(
      "UPDATE idempotency SET state = 'done', uid = ?, tracking_url = ?, updated_at = ? WHERE marker = ? AND state IN ('pending', 'unknown') RETURNING owner_hash",
    ),
    completeIdem: db.prepare(
      "UPDATE idempotency SET state = 'done', uid = ?, tracking_url = ?, updated_at = ? WHERE owner_hash = ? AND idempotency_key = ?",
    ),
    deleteIdem: db.prepare(
      "DELETE FROM idempotency WHERE owner_hash = ? AND idempotency_key = ? AND state IN ('pending', 'unknown')",
    ),
    forgetIdem: db.prepare('DELETE FROM idempotency WHERE owner_hash = ? AND idempotency_key = ?'),
    getOwner: db.prepare<[string], { owner_hash: string; proof: OwnerProof | null; proved_at: number }>(
      'SELECT owner_hash, proof, proved_at FROM ownership WHERE uid = ?',
    ),
    putOwner: db.prepare(
      'INSERT INTO ownership (uid, owner_hash, created_at, proved_at, api_group, proof) VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (uid) DO UPDATE SET owner_hash = excluded.owner_hash, created_at = excluded.created_at, proved_at = excluded.proved_at, api_group = excluded.api_group, proof = excluded.proof',
    ),
    getLink: db.prepare<[string], { merchant: string }>('SELECT merchant FROM merchant_links WHERE id = ?'),
    putLink: db.prepare('INSERT INTO merchant_links (id, merchant, created_at) VALUES (?, ?, ?)'),
    deleteLink: db.prepare('DELETE FROM merchant_links WHERE id = ?'),
    // A merchant id's history (Store.linkMerchant): ids linked to it, its owner records and idempotency claims not yet
    // expired.
    linkedTo: db.prepare<[string], unknown>('SELECT 1 FROM merchant_links WHERE merchant = ? LIMIT 1'),
    ownsAny: db.prepare<[string, number], unknown>(
      'SELECT 1 FROM ownership WHERE owner_hash = ? AND proved_at >= ? LIMIT 1',
    ),
    claimsAny: db.prepare<[string, number, number], unknown>(
      "SELECT 1 FROM idempotency WHERE owner_hash = ? AND (updated_at >= ? OR (state = 'pending' AND updated_at >= ?)) LIMIT 1",
    ),
    // Store.mergeMerchant: every id that leads to a root, links pointed at the root, and what they recorded moved to
    // it.
    linkedIds: db.prepare<[string], { id: string }>(
      'WITH RECURSIVE linked(id) AS (SELECT id FROM merchant_links WHERE merchant = ? UNION SELECT l.id FROM merchant_links l JOIN linked ON l.merchant = linked.id) SELECT id FROM linked',
    ),
    repointLinks: db.prepare('UPDATE merchant_links SET merchant = ? WHERE merchant = ?'),
    moveClaims: db.prepare('UPDATE OR IGNORE idempotency SET owner_hash = ? WHERE owner_hash = ?'),
    dropClaims: db.prepare('DELETE FROM idempotency WHERE owner_hash = ?'),
    moveRecords: db.prepare('UPDATE ownership SET owner_hash = ? WHERE owner_hash = ?'),
    getMeta: db.prepare<[string], { value: Buffer }>('SELECT value FROM meta WHERE name = ?'),
    putMetaOnce: db.prepare('INSERT OR IGNORE INTO meta (name, value) VALUES (?, ?)'),
    ping: db.prepare(
      'INSERT INTO readiness (id, checked_at) VALUES (1, ?) ON CONFLICT (id) DO UPDATE SET checked_at = excluded.checked_at',
    ),
    // The oldest events, without their payloads: the trim deletes the leading ones that expired.
    logHead: db.prepare<[number], { seq: number; received_at: string }>(
      'SELECT seq, received_at FROM events ORDER BY seq LIMIT ?',
    ),
    trimLog: db.prepare<[number], { uid: string }>('DELETE FROM events WHERE seq <= ? RETURNING uid'),
    // A delivery's state goes with its last event.
    forgetState: db.prepare(
      'DELETE FROM delivery_state WHERE uid = ? AND NOT EXISTS (SELECT 1 FROM events WHERE uid = ?)',
    ),
    trimReadViews: db.prepare(
      'DELETE FROM read_views WHERE rowid IN (SELECT rowid FROM read_views WHERE read_at < ? LIMIT ?)',
    ),
    trimReadConfirmations: db.prepare(
      'DELETE FROM read_confirmations WHERE rowid IN (SELECT rowid FROM read_confirmations WHERE abs(read_at) < ? LIMIT ?)',
    ),
    trimOwners: db.prepare(
      'DELETE FROM ownership WHERE rowid IN (SELECT rowid FROM ownership WHERE proved_at < ? LIMIT ?)',
    ),
    // A record still kept (proved since the third) and not proved since the fourth is proved at the first.
    proveOwner: db.prepare('UPDATE ownership SET proved_at = ? WHERE uid = ? AND proved_at >= ? AND proved_at < ?'),
    // A pending claim is its booking in flight: it goes only once it would have turned unknown anyway.
    trimIdem: db.prepare(
      "DELETE FROM idempotency WHERE rowid IN (SELECT rowid FROM idempotency WHERE updated_at < ? AND (state != 'pending' OR updated_at < ?) LIMIT ?)",
    ),
  };
}

type Statements = ReturnType<typeof prepare>;

/**
 * The record writes on one connection (the file's tables exist: sqlite.ts made them). `onTrimmed`: the log's trim
 * deleted delivery states.
 */
export function recordOps(db: Database.Database, retention: Retention | undefined, onTrimmed: () => void): RecordOps {
  const s = prepare(db);
  return {
    ...idempotencyOps(db, s, retention),
    ...ownerOps(db, s, retention),
    // Created once per file; every later start reads the same one.
    cursorSecret: () => {
      s.putMetaOnce.run('cursor_secret', randomBytes(32));
      return s.getMeta.get('cursor_secret')!.value;
    },
    // A real write (one row, one fsync): a read-only file, a full disk or a closed connection fails it.
    ping: (now) => void s.ping.run(now),
    trim: trimStep(db, s, retention, onTrimmed),
  };
}

function idempotencyOps(
  db: Database.Database,
  s: Statements,
  retention: Retention | undefined,
): Pick<RecordOps, 'claim' | 'markUnknown' | 'resolveMarker' | 'complete' | 'release'> {
  const idemExpired = (state: string, updatedAt: number, now: number) => {
    const age = now - updatedAt;
    return age > retention!.idempotencyRetentionMs && (state !== 'pending' || age > PENDING_EXPIRY_MS);
  };
  return {
    // One transaction: the read and the insert cannot interleave with another claim.
    claim: (now, ownerHash, idempotencyKey, fingerprint) =>
      db
        .transaction((): IdempotencyClaim => {
          let row = s.getIdem.get(ownerHash, idempotencyKey);
          // Past its retention a key is gone, whether or not a trim pass has deleted it yet.
          if (row && retention && idemExpired(row.state, row.updated_at, now)) {
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
        })
        .immediate(),

    markUnknown: (now, ownerHash, idempotencyKey) =>
      db
        .transaction((): IdempotencyClaim => {
          s.unknownIdem.run(now, ownerHash, idempotencyKey);
          const row = s.getIdem.get(ownerHash, idempotencyKey);
          // Deleted meanwhile (its retention ended): nothing is known about it any more.
          return row ? claimOf(row) : { state: 'unknown', since: new Date(now) };
        })
        .immediate(),

    resolveMarker: (now, marker, result) => s.resolveIdem.get(result.uid, result.trackingUrl, now, marker)?.owner_hash,
    complete: (now, ownerHash, idempotencyKey, result) =>
      void s.completeIdem.run(result.uid, result.trackingUrl, now, ownerHash, idempotencyKey),
    release: (_now, ownerHash, idempotencyKey) => void s.deleteIdem.run(ownerHash, idempotencyKey),
  };
}

function ownerOps(
  db: Database.Database,
  s: Statements,
  retention: Retention | undefined,
): Pick<RecordOps, 'recordOwners' | 'link' | 'merge' | 'unlink'> {
  /** The root an id's links lead to, MAX_LINK_DEPTH steps at most. */
  const rootOf = (id: string): string => {
    let root = id;
    for (let step = 0; step < MAX_LINK_DEPTH; step += 1) {
      const next = s.getLink.get(root)?.merchant;
      if (next === undefined) break;
      root = next;
    }
    return root;
  };

  /** Whether a merchant id has history (see MerchantLink in store.ts); a link of its own counts too. */
  const hasHistory = (id: string, now: number): boolean => {
    if (s.getLink.get(id) || s.linkedTo.get(id)) return true;
    const records = retention ? now - retention.eventRetentionMs : Number.MIN_SAFE_INTEGER;
    const claims = retention ? now - retention.idempotencyRetentionMs : Number.MIN_SAFE_INTEGER;
    return (
      s.ownsAny.get(id, records) !== undefined ||
      s.claimsAny.get(id, claims, retention ? now - PENDING_EXPIRY_MS : Number.MIN_SAFE_INTEGER) !== undefined
    );
  };

  return {
    recordOwners: (now, records) => {
      // Past the retention a record is gone, whether or not a trim pass has deleted it yet.
      const since = retention ? now - retention.eventRetentionMs : -Infinity;
      for (const record of records) {
        const row = s.getOwner.get(record.uid);
        const current = row && row.proved_at >= since ? row : undefined;
        if (supersedes(record, current))
          s.putOwner.run(record.uid, record.owner, now, now, record.group, record.proof ?? 'read');
        // Its own merchant proved it again: it lives on from now.
        else if (retention && current!.owner_hash === record.owner) s.proveOwner.run(now, record.uid, since, now);
      }
    },

    // The writer thread runs one request at a time: what is read here cannot change before the link is written.
    link: (now, key, previous) => {
      const [a, b] = [rootOf(key), rootOf(previous)];
      if (a === b) return { outcome: 'same', merchant: a };
      const [from, to] = !hasHistory(a, now) ? [a, b] : !hasHistory(b, now) ? [b, a] : [];
      if (from === undefined) return { outcome: 'refused' };
      s.putLink.run(from, to, now);
      return { outcome: 'linked', merchant: to! };
    },

    merge: (now, from, into) =>
      db
        .transaction((): MerchantMerge => {
          const [merged, merchant] = [rootOf(from), rootOf(into)];
          if (merged !== merchant) {
            // Ids linked to the merged root point at the new one: chains stay one step long.
            s.repointLinks.run(merchant, merged);
            s.putLink.run(merged, merchant, now);
          }
          let records = 0;
          let claims = 0;
          let conflicts = 0;
          for (const { id } of s.linkedIds.all(merchant)) {
            claims += s.moveClaims.run(merchant, id).changes;
            // Left behind: a key the merchant used already. Nothing would find it (claims go by the merchant id).
            conflicts += s.dropClaims.run(id).changes;
            records += s.moveRecords.run(merchant, id).changes;
          }
          return { merchant, merged: merged === merchant ? undefined : merged, records, claims, conflicts };
        })
        .immediate(),
    unlink: (_now, id) => s.deleteLink.run(id).changes > 0,
  };
}

function trimStep(
  db: Database.Database,
  s: Statements,
  retention: Retention | undefined,
  onTrimmed: () => void,
): RecordOps['trim'] {
  return (now, phase) => {
    if (phase === 'log') {
      // The log in seq order, which is the order of arrival: only its leading expired events go.
      const cutoff = now - retention!.eventRetentionMs;
      let upTo = 0;
      for (const row of s.logHead.all(TRIM_BATCH)) {
        // A time that does not parse cannot be aged; it must not hold the log back either.
        if (Date.parse(row.received_at) >= cutoff) break;
        upTo = row.seq;
      }
      if (upTo === 0) return false;
      db.transaction(() => {
        const uids = new Set(s.trimLog.all(upTo).map((row) => row.uid));
        for (const uid of uids) s.forgetState.run(uid, uid);
        onTrimmed();
      }).immediate();
      return true;
    }
    if (phase === 'records') {
      const counts = db
        .transaction(() => [
          s.trimOwners.run(now - retention!.eventRetentionMs, TRIM_BATCH).changes,
          s.trimIdem.run(now - retention!.idempotencyRetentionMs, now - PENDING_EXPIRY_MS, TRIM_BATCH).changes,
          s.trimReadViews.run(now - retention!.eventRetentionMs, TRIM_BATCH).changes,
          s.trimReadConfirmations.run(now - retention!.eventRetentionMs, TRIM_BATCH).changes,
        ])
        .immediate();
      return counts.some((count) => count >= TRIM_BATCH);
    }
    // Freed pages beyond what the next inserts will want go back to the file system, a step at a time.
    if (db.pragma('auto_vacuum', { simple: true }) !== INCREMENTAL_VACUUM) return false;
    const free = db.pragma('freelist_count', { simple: true }) as number;
    const pages = db.pragma('page_count', { simple: true }) as number;
    if (free <= freePagesKept(pages)) return false;
    db.pragma(`incremental_vacuum(${Math.min(VACUUM_STEP_PAGES, free - freePagesKept(pages))})`);
    return true;
  };
}

// The SQLite store's writer thread: a worker_threads Worker that owns the one connection that writes the file (opened
// by the first request; a thread whose store closed may serve the process's next store, see sqlite.ts). Every write
// (events, idempotency claims, owner records, the cursor secret, readiness, retention trims) happens here, so a commit
// and its fsync never hold the main thread's event loop. Requests that arrive while a commit runs wait in the port and
// go together in the next transaction (one fsync), each in a savepoint of its own; a request is answered only after the
// transaction that holds it has committed.
import { randomBytes } from 'node:crypto';
import { type MessagePort, receiveMessageOnPort, workerData } from 'node:worker_threads';
import Database from 'better-sqlite3';
import type { JsonObject, WireWebhookEvent } from '../upstream/wire.js';
import { factsOf, judge, type MilestoneState } from '../domain/milestones.js';
import { carriedOver, mergeView, moverFields, viewFields, type StoredView } from '../domain/delivery-view.js';
import { bookingMarker } from '../domain/booking-marker.js';
import { fingerprint } from '../domain/canonical-json.js';
import { TRIM_BATCH, proofRefreshMs, type Retention } from './retention.js';
import {
  PENDING_EXPIRY_MS,
  courierJson,
  courierPart,
  formerCouriersJson,
  markOf,
  supersedes,
  type BookingResult,
  type IdempotencyClaim,
  type MerchantLink,
  type MerchantMerge,
  type OwnerEntry,
  type OwnerProof,
  type ReadRecord,
} from './store.js';

/** What the main thread hands the writer thread at its start. */
export interface WriterData {
  port: MessagePort;
}

/** An events row as SQLite returns it (sqlite.ts turns it into a StoredEvent). */
export interface EventRow {
  seq: number;
  uid: string;
  name: string;
  status_text: string | null;
  received_at: string;
  /** The event's mark (MARK in store.ts): 0 accepted; bits 1 stale, 2 accepted for its courier only, 4 contradicts. */
  stale: number;
  payload: string;
  /** StoredEvent.carried as JSON; null when nothing was carried over. */
  carried: string | null;
}

/** One event's outcome as the writer answers it: the main thread still has the payload of a new one. */
export type AppendOutcome =
  | { duplicate: true; row: EventRow }
  | { duplicate: false; seq: number; mark: number; statusText: string | null; carried: string | null }
  | { error: WriterError };

/** An error as it crosses the thread boundary (SqliteError's code kept). */
export interface WriterError {
  name: string;
  message: string;
  code?: string;
}

/** The trim pass's three kinds of step (see SqliteStore's #trim). */
export type TrimPhase = 'log' | 'records' | 'vacuum';

/**
 * Every request the main thread sends, by name, with its arguments and answer.
 * `now` is the main thread's clock when it sent the request: the time the
 * caller asked, which is the time written and compared against retentions.
 */
export interface WriterOps {
  /** Opens the file (its tables exist: sqlite.ts made them) for the requests that follow. */
  open(now: number, file: string, retention: Retention | undefined): void;
  /** Events as their payload's JSON: what is stored, and what the thread de-duplicates and ranks by. */
  append(now: number, events: ReadonlyArray<{ json: string; receivedAt: string }>): AppendOutcome[];
  /** Merges a read into its delivery's view (Store.recordRead). */
  mergeRead(now: number, read: ReadRecord): void;
  claim(now: number, ownerHash: string, idempotencyKey: string, fingerprint: string): IdempotencyClaim;
  markUnknown(now: number, ownerHash: string, idempotencyKey: string): IdempotencyClaim;
  resolveMarker(now: number, marker: string, result: BookingResult): string | undefined;
  complete(now: number, ownerHash: string, idempotencyKey: string, result: BookingResult): void;
  release(now: number, ownerHash: string, idempotencyKey: string): void;
  recordOwners(now: number, records: readonly OwnerEntry[]): void;
  /** Store.linkMerchant, in one transaction. */
  link(now: number, key: string, previous: string): MerchantLink;
  /** Store.mergeMerchant, in one transaction. */
  merge(now: number, from: string, into: string): MerchantMerge;
  unlink(now: number, id: string): boolean;
  cursorSecret(now: number): Uint8Array;
  ping(now: number): void;
  /** One step of a trim pass; true when that phase has more to do. */
  trim(now: number, phase: TrimPhase): boolean;
  /** Answered after every request sent before it, with the connection closed. */
  close(now: number): void;
}

/** A request's arguments after `now`. */
export type WriterArgs<Op extends keyof WriterOps> =
  Parameters<WriterOps[Op]> extends [number, ...infer Rest] ? Rest : never;

export interface WriterRequest {
  id: number;
  op: keyof WriterOps;
  now: number;
  args: unknown[];
}

export type WriterReply = { id: number; value: unknown } | { id: number; error: WriterError };

/** auto_vacuum = INCREMENTAL: freed pages can be given back to the file system a few at a time. */
const INCREMENTAL_VACUUM = 2;
/** Pages one incremental vacuum step gives back (1 MiB of 4 KiB pages, a few ms of I/O). */
const VACUUM_STEP_PAGES = 256;
/** Free pages kept for the next inserts: a quarter of the file, at least 4 MiB; only the excess is given back. */
const freePagesKept = (pages: number) => Math.max(1024, Math.floor(pages / 4));

/** Requests that may share a transaction with others; a trim step and close run alone. */
const SHARED: ReadonlySet<keyof WriterOps> = new Set([
  'append',
  'mergeRead',
  'claim',
  'markUnknown',
  'resolveMarker',
  'complete',
  'release',
  'recordOwners',
  'link',
  'merge',
  'unlink',
  'cursorSecret',
  'ping',
]);
/**
 * Links followed at most, looking for a merchant's root (a chain is one step per rotation, and link() keeps it one step
 * long).
 */
export const MAX_LINK_DEPTH = 16;

interface StateRow {
  rank: number;
  terminal: number;
  seq: number;
  courier: string | null;
  former_couriers: string | null;
  picked_up: number | null;
  view: string | null;
}

const stateOf = (row: StateRow): MilestoneState => ({
  rank: row.rank,
  terminal: row.terminal === 1,
  ...(row.picked_up === 1 ? { pickedUp: true as const } : {}),
  seq: row.seq,
  ...courierPart(row.courier, row.former_couriers),
});

const viewOf = (row: StateRow | undefined): StoredView => (row?.view ? (JSON.parse(row.view) as StoredView) : {});

type ClaimRow = { state: string; uid: string | null; tracking_url: string | null; updated_at: number };
function claimOf(row: ClaimRow): IdempotencyClaim {
  if (row.state === 'done') return { state: 'done', result: { uid: row.uid!, trackingUrl: row.tracking_url } };
  if (row.state === 'unknown') return { state: 'unknown', since: new Date(row.updated_at) };
  return { state: 'pending' };
}

function asWriterError(error: unknown): WriterError {
  if (!(error instanceof Error)) return { name: 'Error', message: String(error) };
  const code = (error as { code?: unknown }).code;
  return { name: error.name, message: error.message, ...(typeof code === 'string' ? { code } : {}) };
}

/** The write operations on one connection (the file's tables exist: sqlite.ts made them). */
function writeOps(db: Database.Database, retention: Retention | undefined): Omit<WriterOps, 'open'> {
  const s = {
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
    findEvent: db.prepare<[string, string, string], EventRow>(
      'SELECT * FROM events WHERE uid = ? AND name = ? AND hash = ?',
    ),
    insertEvent: db.prepare(
      'INSERT INTO events (uid, name, hash, status_text, received_at, stale, payload, carried) VALUES (?, ?, ?, ?, ?, ?, ?, ?)',
    ),
    getState: db.prepare<[string], StateRow>(
      'SELECT rank, terminal, seq, courier, former_couriers, picked_up, view FROM delivery_state WHERE uid = ?',
    ),
    putState: db.prepare(
      'INSERT INTO delivery_state (uid, rank, terminal, seq, courier, former_couriers, picked_up, view) VALUES (?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (uid) DO UPDATE SET rank = excluded.rank, terminal = excluded.terminal, seq = excluded.seq, courier = excluded.courier, former_couriers = excluded.former_couriers, picked_up = excluded.picked_up, view = excluded.view',
    ),
    putView: db.prepare('UPDATE delivery_state SET view = ? WHERE uid = ?'),
    getReadView: db.prepare<[string], { view: string }>('SELECT view FROM read_views WHERE uid = ?'),
    putReadView: db.prepare('INSERT OR REPLACE INTO read_views (uid, view, read_at) VALUES (?, ?, ?)'),
    dropReadView: db.prepare('DELETE FROM read_views WHERE uid = ?'),
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

  /** What reads showed of a delivery before it had a state: the view its first event is merged over. */
  const readView = (uid: string) => JSON.parse(s.getReadView.get(uid)?.view ?? '{}') as StoredView;

  const idemExpired = (state: string, updatedAt: number, now: number) => {
    const age = now - updatedAt;
    return age > retention!.idempotencyRetentionMs && (state !== 'pending' || age > PENDING_EXPIRY_MS);
  };

  // One event, ranked against what the batch already wrote.
  // The same steps as the Redis APPEND script: judge, merge the view, keep what was carried over.
  const appendEvent = ({ json, receivedAt }: { json: string; receivedAt: string }, now: number): AppendOutcome => {
    const payload = JSON.parse(json) as WireWebhookEvent;
    // An event of the delivery proves its owner record: it lives on from now.
    if (retention)
      s.proveOwner.run(now, payload.uid, now - retention.eventRetentionMs, now - proofRefreshMs(retention));
    const hash = fingerprint(payload);
    const existing = s.findEvent.get(payload.uid, payload.event_name, hash);
    if (existing) return { duplicate: true, row: existing };
    const row = s.getState.get(payload.uid);
    const current: MilestoneState | undefined = row && stateOf(row);
    const step = judge(current, factsOf(payload));
    const next = step.state;
    const statusText = typeof payload.status === 'string' ? payload.status : null;
    // The view is kept once the delivery has a state: a stale event only fills what is missing.
    let carried: string | null = null;
    let view: StoredView | undefined;
    if (next) {
      const own = viewFields(payload as unknown as JsonObject);
      const mover = moverFields(payload.event_name, statusText);
      view = mergeView(row ? viewOf(row) : readView(payload.uid), own, !step.stale, step.moved ? mover : undefined);
      const over = carriedOver(view, own, mover);
      if (over) carried = JSON.stringify(over);
    }
    const info = s.insertEvent.run(
      payload.uid,
      payload.event_name,
      hash,
      statusText,
      receivedAt,
      markOf(step),
      json,
      carried,
    );
    const seq = Number(info.lastInsertRowid);
    if (next) {
      const courier = next.courier ? courierJson(next.courier) : null;
      const formers = next.formerCouriers ? formerCouriersJson(next.formerCouriers) : null;
      // Only an event that moved the milestone (or made it final) is written as its last mover.
      const moverSeq = step.moved ? seq : current!.seq!;
      s.putState.run(
        payload.uid,
        next.rank,
        next.terminal ? 1 : 0,
        moverSeq,
        courier,
        formers,
        next.pickedUp ? 1 : 0,
        JSON.stringify(view),
      );
      if (!row) s.dropReadView.run(payload.uid);
    }
    return { duplicate: false, seq, mark: markOf(step), statusText, carried };
  };
  // The batch's events in one savepoint (a nested better-sqlite3 transaction): two statements for the batch, not per
  // event.
  const appendAll = db.transaction((events: ReadonlyArray<{ json: string; receivedAt: string }>, now: number) =>
    events.map((event) => appendEvent(event, now)),
  );
  // Each event in a savepoint of its own: one that fails is undone alone and fails only itself.
  const appendOne = db.transaction(appendEvent);

  return {
    append: (now, events) => {
      try {
        return appendAll(events, now);
      } catch (error) {
        // A failure of the transaction itself (disk full, I/O) is every event's: let it end the batch.
        if (!db.inTransaction) throw error;
      }
      // An event failed, and the batch's savepoint was undone: again, each in a savepoint of its own.
      return events.map((event) => {
        try {
          return appendOne(event, now);
        } catch (error) {
          if (!db.inTransaction) throw error;
          return { error: asWriterError(error) };
        }
      });
    },

    // A read newer than the state overwrites; one older than the state's last move only fills. Before any state, the
    // read is kept apart (a later read overwrites it) for the first event to be merged over.
    mergeRead: (now, { uid, body, basis }) => {
      const row = s.getState.get(uid);
      if (!row)
        return void s.putReadView.run(uid, JSON.stringify(mergeView(readView(uid), viewFields(body), true)), now);
      const view = mergeView(viewOf(row), viewFields(body), row.seq <= basis);
      const json = JSON.stringify(view);
      if (json !== row.view) s.putView.run(json, uid);
    },

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

    // Created once per file; every later start reads the same one.
    cursorSecret: () => {
      s.putMetaOnce.run('cursor_secret', randomBytes(32));
      return s.getMeta.get('cursor_secret')!.value;
    },

    // A real write (one row, one fsync): a read-only file, a full disk or a closed connection fails it.
    ping: (now) => void s.ping.run(now),

    trim: (now, phase) => {
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
        }).immediate();
        return true;
      }
      if (phase === 'records') {
        const [owners, idem, reads] = db
          .transaction(() => [
            s.trimOwners.run(now - retention!.eventRetentionMs, TRIM_BATCH).changes,
            s.trimIdem.run(now - retention!.idempotencyRetentionMs, now - PENDING_EXPIRY_MS, TRIM_BATCH).changes,
            s.trimReadViews.run(now - retention!.eventRetentionMs, TRIM_BATCH).changes,
          ])
          .immediate();
        return owners! >= TRIM_BATCH || idem! >= TRIM_BATCH || reads! >= TRIM_BATCH;
      }
      // Freed pages beyond what the next inserts will want go back to the file system, a step at a time.
      if (db.pragma('auto_vacuum', { simple: true }) !== INCREMENTAL_VACUUM) return false;
      const free = db.pragma('freelist_count', { simple: true }) as number;
      const pages = db.pragma('page_count', { simple: true }) as number;
      if (free <= freePagesKept(pages)) return false;
      db.pragma(`incremental_vacuum(${Math.min(VACUUM_STEP_PAGES, free - freePagesKept(pages))})`);
      return true;
    },

    close: () => db.close(),
  };
}

/** The connection the thread serves now, and its operations: none before open and after close. */
let current: { db: Database.Database; ops: Omit<WriterOps, 'open'> } | undefined;

function call(request: WriterRequest): unknown {
  if (request.op === 'open') {
    const [file, retention] = request.args as [string, Retention | undefined];
    const db = new Database(file);
    // First: the store's reading connection may hold the file a moment, and a pragma must wait for it, not fail.
    db.pragma('busy_timeout = 5000');
    db.pragma('journal_mode = WAL');
    db.pragma('synchronous = FULL');
    current = { db, ops: writeOps(db, retention) };
    return undefined;
  }
  if (!current) throw new Error('The SQLite writer thread has no file open.');
  const value = (current.ops[request.op] as (now: number, ...args: unknown[]) => unknown)(request.now, ...request.args);
  if (request.op === 'close') current = undefined;
  return value;
}

/**
 * Runs what arrived together: the requests that may share a transaction in one
 * (one commit, one fsync), each in a savepoint so that one that fails is undone
 * and fails alone; any other request on its own. Answers after the commit.
 */
function serve(port: MessagePort, requests: WriterRequest[]): void {
  while (requests.length > 0) {
    const first = requests[0]!;
    if (!current || !SHARED.has(first.op)) {
      requests.shift();
      let reply: WriterReply;
      try {
        reply = { id: first.id, value: call(first) };
      } catch (error) {
        reply = { id: first.id, error: asWriterError(error) };
      }
      port.postMessage(reply);
      continue;
    }
    const { db } = current;
    let end = 1;
    while (end < requests.length && SHARED.has(requests[end]!.op)) end += 1;
    const group = requests.splice(0, end);
    let replies: WriterReply[];
    try {
      replies = db
        .transaction(() =>
          group.map((request): WriterReply => {
            try {
              return { id: request.id, value: db.transaction(() => call(request))() };
            } catch (error) {
              // The transaction itself failed (disk full, I/O): every request in it fails.
              if (!db.inTransaction) throw error;
              return { id: request.id, error: asWriterError(error) };
            }
          }),
        )
        .immediate();
    } catch (error) {
      const failed = asWriterError(error);
      replies = group.map((request) => ({ id: request.id, error: failed }));
    }
    for (const reply of replies) port.postMessage(reply);
  }
}

const { port } = workerData as WriterData;
port.on('message', (request: WriterRequest) => {
  // Everything that queued up meanwhile joins this transaction.
  const requests = [request];
  for (let next = receiveMessageOnPort(port); next; next = receiveMessageOnPort(port))
    requests.push(next.message as WriterRequest);
  serve(port, requests);
});

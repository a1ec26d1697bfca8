// The SQLite store's writer thread: a worker_threads Worker that owns the one
// connection that writes the file (opened by the first request; a thread whose
// store closed may serve the process's next store, see sqlite.ts). Every write
// (events, idempotency claims, owner records, the cursor secret, readiness,
// retention trims) happens here, so a commit and its fsync never hold the main
// thread's event loop. Requests that arrive while a commit runs wait in the port
// and go together in the next transaction (one fsync), each in a savepoint of
// its own; a request is answered only after the transaction that holds it has
// committed. The events' writes are in sqlite-append.ts, the others in sqlite-records.ts.
import { type MessagePort, receiveMessageOnPort, workerData } from 'node:worker_threads';
import Database from 'better-sqlite3';
import type { Retention } from './retention.js';
import type { BookingResult, IdempotencyClaim, MerchantLink, MerchantMerge, OwnerEntry, ReadRecord } from './store.js';
import { EventAppender, asWriterError, type EventToWrite } from './sqlite-append.js';
import { recordOps } from './sqlite-records.js';

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

/**
 * One event's outcome as the writer answers it: the main thread still has the payload of a new one. `skipped`: a
 * conditional event whose condition did not hold, not stored.
 */
export type AppendOutcome =
  | { duplicate: true; row: EventRow }
  | { duplicate: false; seq: number; mark: number; statusText: string | null; carried: string | null }
  | { skipped: true }
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
  append(now: number, events: readonly EventToWrite[]): AppendOutcome[];
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
/** The write operations on one connection, and what undoes the events' states kept in memory. */
function writeOps(
  db: Database.Database,
  retention: Retention | undefined,
): Omit<WriterOps, 'open'> & { forget(): void } {
  const events = new EventAppender(db, retention);
  return {
    append: (now, batch) => events.append(batch, now),
    mergeRead: (now, read) => events.mergeRead(read, now),
    ...recordOps(db, retention, () => events.forget()),
    close: () => db.close(),
    forget: () => events.forget(),
  };
}

/** The connection the thread serves now, and its operations: none before open and after close. */
let current: { db: Database.Database; ops: ReturnType<typeof writeOps> } | undefined;

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
              current!.ops.forget();
              // The transaction itself failed (disk full, I/O): every request in it fails.
              if (!db.inTransaction) throw error;
              return { id: request.id, error: asWriterError(error) };
            }
          }),
        )
        .immediate();
    } catch (error) {
      // Nothing of the transaction is in the file: what the appender kept of it goes too.
      current.ops.forget();
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

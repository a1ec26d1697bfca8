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
import type { Worker } from 'node:worker_threads';
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
  type ConfirmedView,
  type DeliveryState,
  type EventFilter,
  type EventInput,
  type NotStored,
  type ReceivedEvent,
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
import type { DataDirLock } from './data-dir-lock.js';
import { openStoreFile, prepareSchema, readStatements, type ReadStatements, type StateRow } from './sqlite-schema.js';
import { WriterThread, writerError } from './sqlite-thread.js';
import { damagedFileMessage, isDamage } from './sqlite-file.js';
import type { EventToWrite } from './sqlite-append.js';
import type { AppendOutcome, EventRow, TrimPhase, WriterArgs, WriterOps } from './sqlite-writer.js';

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

export class SqliteStore implements Store {
  /** The main thread's connection: the store reads through it and never writes (the writer thread does). */
  readonly db: Database.Database;
  readonly #statements: ReadStatements;
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
    const { db, lock } = openStoreFile(dataDir, options.fileName, options.logger);
    this.db = db;
    this.#lock = lock;
    prepareSchema(db);
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
    this.#statements = readStatements(db);
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

  appendEvents(events: ReadonlyArray<ReceivedEvent>): Promise<AppendResult[]>;
  appendEvents(events: ReadonlyArray<EventInput>): Promise<Array<AppendResult | NotStored>>;
  async appendEvents(events: ReadonlyArray<EventInput>): Promise<Array<AppendResult | NotStored>> {
    // One transaction for the batch (one fsync) on the writer thread; each event in a savepoint of its own.
    // Each payload crosses to the thread as its JSON, which is what is stored; one that cannot be written fails alone.
    const outcomes: Array<AppendResult | NotStored | Error | undefined> = [];
    const sent: EventToWrite[] = [];
    const sentIndex: number[] = [];
    events.forEach(({ payload, receivedAt, onlyIf }, index) => {
      try {
        sent.push(
          onlyIf
            ? { json: JSON.stringify(payload), receivedAt, onlyIf }
            : { json: JSON.stringify(payload), receivedAt },
        );
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
      throw new PartialAppendError(outcomes as Array<AppendResult | NotStored | Error>);
    return outcomes as Array<AppendResult | NotStored>;
  }

  /** One event's answer from the thread, as the store's caller gets it. */
  #appended(answer: AppendOutcome, { payload, receivedAt }: EventInput): AppendResult | NotStored | Error {
    if ('error' in answer) {
      const error = writerError(answer.error);
      this.#noticeDamage(error);
      return error;
    }
    if ('skipped' in answer) return answer;
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

  async confirmedViews(uids: readonly string[]): Promise<Map<string, ConfirmedView>> {
    const views = new Map<string, ConfirmedView>();
    this.#read(() => {
      for (const uid of uids) {
        const row = this.#statements.confirmedView.get(uid);
        if (!row?.view) continue;
        views.set(uid, {
          body: viewBody(uid, JSON.parse(row.view) as StoredView),
          readAt: row.read_at ?? undefined,
          eventAt: row.event_at ? Date.parse(row.event_at) : undefined,
          settled: row.settled === 1,
        });
      }
    });
    return views;
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

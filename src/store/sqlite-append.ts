// The event log's writes on the SQLite writer thread (sqlite-writer.ts): each
// event de-duplicated, judged once against its delivery's state (judge() in
// src/domain/milestones.ts, the one rule; the Redis append script is its copy),
// stored with that verdict as its mark, and merged into the delivery's view,
// all in the transaction of its batch. The states of recently written
// deliveries are kept parsed in memory: this thread is the file's only writer
// (the DATA_DIR lock), so what it wrote is what the file holds, and a savepoint
// that is undone drops them all.
import type Database from 'better-sqlite3';
import type { JsonObject, WireWebhookEvent } from '../upstream/wire.js';
import { factsOf, judge, type MilestoneState, type Transition } from '../domain/milestones.js';
import { carriedOver, mergeView, moverFields, viewFields, type StoredView } from '../domain/delivery-view.js';
import { fingerprint } from '../domain/canonical-json.js';
import {
  courierJson,
  courierPart,
  formerCouriersJson,
  markOf,
  readConfirmation,
  type AppendCondition,
  type ReadRecord,
} from './store.js';
import { proofRefreshMs, type Retention } from './retention.js';
import type { AppendOutcome, EventRow } from './sqlite-writer.js';
import type { StateRow as StateColumns } from './sqlite-schema.js';

/** An event as it crosses to the writer thread: its payload's JSON (what is stored), and its condition, if any. */
export interface EventToWrite {
  json: string;
  receivedAt: string;
  onlyIf?: AppendCondition;
}

/** The state as the main thread reads it, with the view the writer merges into. */
interface StateRow extends StateColumns {
  view: string | null;
}

/** A delivery's state as this thread last wrote (or read) it. */
interface KnownState {
  state: MilestoneState;
  view: StoredView;
}

/** Deliveries whose state is kept in memory, at most (the oldest written goes first). */
const KNOWN_STATES = 10_000;

const stateOf = (row: StateRow): MilestoneState => ({
  rank: row.rank,
  terminal: row.terminal === 1,
  ...(row.picked_up === 1 ? { pickedUp: true as const } : {}),
  seq: row.seq,
  ...courierPart(row.courier, row.former_couriers),
});

const viewOf = (row: StateRow | undefined): StoredView => (row?.view ? (JSON.parse(row.view) as StoredView) : {});

/** Whether a conditional event's condition holds (see AppendCondition in store.ts). */
function holds(condition: AppendCondition | undefined, current: MilestoneState | undefined, step: Transition): boolean {
  if (condition === undefined) return true;
  if (condition === 'accepted') return !step.stale;
  return step.moved && (current?.terminal === true || (step.state!.terminal && step.state!.rank === current?.rank));
}

export class EventAppender {
  readonly #s;
  readonly #known = new Map<string, KnownState>();
  readonly #all: (events: readonly EventToWrite[], now: number) => AppendOutcome[];
  readonly #one: (event: EventToWrite, now: number) => AppendOutcome;

  constructor(
    private readonly db: Database.Database,
    private readonly retention?: Retention,
  ) {
    this.#s = {
      // The unique index answers alone: the row is read only for a duplicate.
      findEvent: db
        .prepare<[string, string, string], number>('SELECT seq FROM events WHERE uid = ? AND name = ? AND hash = ?')
        .pluck(),
      eventAt: db.prepare<[number], EventRow>('SELECT * FROM events WHERE seq = ?'),
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
      // A newer read replaces what an older one confirmed; an older one arriving late changes nothing.
      confirmRead: db.prepare(
        'INSERT INTO read_confirmations (uid, read_at, settled) VALUES (?, ?, ?) ON CONFLICT (uid) DO UPDATE SET settled = CASE WHEN abs(excluded.read_at) >= abs(read_at) THEN excluded.settled ELSE settled END, read_at = CASE WHEN abs(excluded.read_at) >= abs(read_at) THEN excluded.read_at ELSE read_at END',
      ),
      // A record still kept (proved since the third) and not proved since the fourth is proved at the first.
      proveOwner: db.prepare('UPDATE ownership SET proved_at = ? WHERE uid = ? AND proved_at >= ? AND proved_at < ?'),
    };
    // The batch's events in one savepoint (a nested better-sqlite3 transaction): two statements for the batch, not per
    // event.
    this.#all = db.transaction((events: readonly EventToWrite[], now: number) =>
      events.map((event) => this.#append(event, now)),
    );
    // Each event in a savepoint of its own: one that fails is undone alone and fails only itself.
    this.#one = db.transaction((event: EventToWrite, now: number) => this.#append(event, now));
  }

  /** A batch of events, each judged against what the ones before it wrote; `now` proves their owner records. */
  append(events: readonly EventToWrite[], now: number): AppendOutcome[] {
    try {
      return this.#all(events, now);
    } catch (error) {
      this.forget();
      // A failure of the transaction itself (disk full, I/O) is every event's: let it end the batch.
      if (!this.db.inTransaction) throw error;
    }
    // An event failed, and the batch's savepoint was undone: again, each in a savepoint of its own.
    return events.map((event) => {
      try {
        return this.#one(event, now);
      } catch (error) {
        this.forget();
        if (!this.db.inTransaction) throw error;
        return { error: asWriterError(error) };
      }
    });
  }

  /** What a write that was undone may have left here: the file's state is read again. */
  forget(): void {
    this.#known.clear();
  }

  /** A delivery's state and view, as the file holds them now; undefined before its first state. */
  #stateOf(uid: string): KnownState | undefined {
    const known = this.#known.get(uid);
    if (known) return known;
    const row = this.#s.getState.get(uid);
    return row && { state: stateOf(row), view: viewOf(row) };
  }

  #remember(uid: string, known: KnownState): void {
    this.#known.delete(uid);
    this.#known.set(uid, known);
    if (this.#known.size > KNOWN_STATES) this.#known.delete(this.#known.keys().next().value!);
  }

  // One event, ranked against what the batch already wrote.
  // The same steps as the Redis APPEND script: judge, merge the view, keep what was carried over.
  #append({ json, receivedAt, onlyIf }: EventToWrite, now: number): AppendOutcome {
    const s = this.#s;
    const payload = JSON.parse(json) as WireWebhookEvent;
    // An event of the delivery proves its owner record: it lives on from now.
    const retention = this.retention;
    if (retention)
      s.proveOwner.run(now, payload.uid, now - retention.eventRetentionMs, now - proofRefreshMs(retention));
    const hash = fingerprint(payload);
    const existing = s.findEvent.get(payload.uid, payload.event_name, hash);
    if (existing !== undefined) return { duplicate: true, row: s.eventAt.get(existing)! };
    const known = this.#stateOf(payload.uid);
    const current = known?.state;
    const step = judge(current, factsOf(payload));
    if (!holds(onlyIf, current, step)) return { skipped: true };
    const next = step.state;
    const statusText = typeof payload.status === 'string' ? payload.status : null;
    // The view is kept once the delivery has a state: a stale event only fills what is missing.
    let carried: string | null = null;
    let view: StoredView | undefined;
    if (next) {
      const own = viewFields(payload as unknown as JsonObject);
      const mover = moverFields(payload.event_name, statusText);
      view = mergeView(
        known ? known.view : this.#readView(payload.uid),
        own,
        !step.stale,
        step.moved ? mover : undefined,
      );
      const over = carriedOver(view, own, mover);
      if (over) carried = JSON.stringify(over);
    }
    const mark = markOf(step);
    const info = s.insertEvent.run(payload.uid, payload.event_name, hash, statusText, receivedAt, mark, json, carried);
    const seq = Number(info.lastInsertRowid);
    if (next) {
      // Only an event that moved the milestone (or made it final) is written as its last mover.
      const state: MilestoneState = { ...next, seq: step.moved ? seq : current!.seq! };
      s.putState.run(
        payload.uid,
        state.rank,
        state.terminal ? 1 : 0,
        state.seq,
        state.courier ? courierJson(state.courier) : null,
        state.formerCouriers ? formerCouriersJson(state.formerCouriers) : null,
        state.pickedUp ? 1 : 0,
        JSON.stringify(view),
      );
      if (!known) s.dropReadView.run(payload.uid);
      this.#remember(payload.uid, { state, view: view! });
    }
    return { duplicate: false, seq, mark, statusText, carried };
  }

  /** What reads showed of a delivery before it had a state: the view its first event is merged over. */
  #readView(uid: string): StoredView {
    return JSON.parse(this.#s.getReadView.get(uid)?.view ?? '{}') as StoredView;
  }

  // A read newer than the state overwrites; one older than the state's last move only fills. Before any state, the
  // read is kept apart (a later read overwrites it) for the first event to be merged over.
  mergeRead({ uid, body, basis, readAt }: ReadRecord, now: number): void {
    this.#known.delete(uid);
    const row = this.#s.getState.get(uid);
    const confirmed = readConfirmation(body.status, row && { ...row, terminal: row.terminal === 1 }, readAt ?? now);
    this.#s.confirmRead.run(uid, confirmed.at, confirmed.settled ? 1 : 0);
    if (!row)
      return void this.#s.putReadView.run(
        uid,
        JSON.stringify(mergeView(this.#readView(uid), viewFields(body), true)),
        now,
      );
    const view = mergeView(viewOf(row), viewFields(body), row.seq <= basis);
    const json = JSON.stringify(view);
    if (json !== row.view) this.#s.putView.run(json, uid);
  }
}

/** An error as it crosses the thread boundary (SqliteError's code kept). */
export function asWriterError(error: unknown): { name: string; message: string; code?: string } {
  if (!(error instanceof Error)) return { name: 'Error', message: String(error) };
  const code = (error as { code?: unknown }).code;
  return { name: error.name, message: error.message, ...(typeof code === 'string' ? { code } : {}) };
}

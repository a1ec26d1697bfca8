// The shared store: with REDIS_URL, every instance reads and writes one Redis. Same semantics as the SQLite store
// (sqlite.ts); what must be atomic there is one transaction, here one Lua script. Keys, under a prefix (default "dg:"):
//   seq                        counter, INCR'd by the append script
//   log                        stream of events; entry id "<seq>-0"
//   delivery:<uid>             hash: rank, terminal, seq, pickedUp (the milestone state), courier and
//                              formers (JSON, see courierJson), delivery, location (seq of the
//                              latest non-stale event of each kind), and the delivery's view as
//                              fields "v:<key>" (JSON values, src/domain/delivery-view.ts); a read before
//                              any event leaves the view alone, with the retention as its TTL
//   delivery:<uid>:events      sorted set of the delivery's seqs (eventsAfter with uids)
//   delivery:<uid>:dedup       hash "<sha256 of canonical payload> <event name>" → "<seq> <append token>"
//   idem:<owner>:<key>         hash: fingerprint, state (pending|done|unknown), uid, trackingUrl, updatedAt, token, owner
//   idem-marker:<marker>       the name of the idem key a booking marker belongs to (src/domain/booking-marker.ts)
//   owner:<uid>                "<merchant> <group or -> <proof> <ms>" (before proofs: "<owner hash>" or "<owner hash> <group>"):
//                              who the delivery belongs to, how that is known (src/access/owners.ts), and when it was recorded
//   merchant-link:<id>         the merchant a key hash (or merchant id) belongs to (src/access/merchants.ts); no TTL
//   merchant-keys:<id>         set of the ids linked to a merchant id (its history, and what a merge re-points); no TTL
//   merchant-history:<id>      hash: records ('1' once an owner record named it), claims (its idempotency claims not
//                              released): whether linking it elsewhere would leave something behind (linkMerchant);
//                              kept as long as the longest-lived record or claim that named it
//   merchant-history-ready     set once the history of data written before it was kept has been filled in
//   owner-claims               sorted set of the uids the operator claimed lately (owner records written with replace),
//                              each scored by its claim's version; the last OWNER_CLAIMS_KEPT (ownerClaimsAfter)
//   owner-claims:version       counter of those claims
//   unfinished:<owner>         sorted set (all scores 0, so in uid order) of the owner's deliveries reconciliation
//                              may read unfollowed: added with each owner record written, removed once found final, expired or another's
//   read-lease:<name>          the token of the instance reading an unfollowed delivery right now, or lately (leaseReads)
//   cursor-secret              random secret the cursors of every instance derive from (src/domain/cursor.ts)
//   trim                       lease of the instance trimming expired data right now
// With a retention, idempotency and ownership keys carry a TTL, and a timer trims the log's expired head (XTRIM MINID)
// after removing those events from their deliveries' keys, which go with their last event. All keys of one script are
// named in KEYS; they live in different slots, so Redis Cluster is not supported.
import { randomBytes } from 'node:crypto';
import { Redis } from 'ioredis';
import { connectRedis, logConnection, redisFailure, type RedisConnection } from '../redis/connection.js';
import type { Logger } from '../logger.js';
import type { JsonObject, WireWebhookEvent } from '../upstream/wire.js';
import { DELIVERED_RANK, factsOf, NOT_DELIVERED_RANK, statusRank } from '../domain/milestones.js';
import { deliveryStatus } from '../domain/status.js';
import { moverFields, viewBody, viewFields, type StoredView } from '../domain/delivery-view.js';
import {
  TRIM_BATCH,
  TrimSchedule,
  proofRefreshMs,
  trimIntervalMs,
  yieldToEventLoop,
  type Retention,
} from './retention.js';
import {
  PartialAppendError,
  PENDING_EXPIRY_MS,
  courierJson,
  courierPart,
  flagsOf,
  type AppendResult,
  type BookingResult,
  type DeliveryState,
  type EventFilter,
  type AppendCondition,
  type EventInput,
  type IdempotencyClaim,
  type NotStored,
  type ReadRecord,
  type ConfirmedView,
  type ReceivedEvent,
  REDIS_STORE,
  type Store,
  type StoredEvent,
} from './store.js';
import { fingerprint } from '../domain/canonical-json.js';
import { bookingMarker } from '../domain/booking-marker.js';
import { RedisRecords, confirmedViewOf, flag } from './redis-records.js';
import { APPEND_FIELDS, defineAppendScripts, defineScripts, type StreamEntry } from './redis-scripts.js';

/** A claim as the CLAIM and UNKNOWN scripts answer it. */
function claimOf([state, first, second]: [string, string?, string?]): IdempotencyClaim {
  if (state === 'done') return { state, result: { uid: first!, trackingUrl: second ?? null } };
  if (state === 'unknown') return { state, since: new Date(Number(first)) };
  return { state: state as 'claimed' | 'pending' | 'conflict' };
}

/**
 * How long one instance may hold the trim lease; a pass that takes longer shares the work, harmlessly (every step is
 * idempotent).
 */
const TRIM_LEASE_MS = 60_000;

export interface RedisStoreOptions {
  /** Prefix of every key; several facades (or tests) can share one Redis with different prefixes. */
  prefix?: string;
  logger?: Logger;
  /** Quit the client on close() (the store opened it). */
  ownsClient?: boolean;
  /** Delete what is older than this (on a timer, and by TTL); without it nothing is ever deleted. */
  retention?: Retention;
  /**
   * Replicas that must confirm each stored batch of events before appendEvents
   * resolves (Redis WAIT), and for how long it waits. `min` undefined: 1 when
   * the primary has a replica, else 0. Without this option nothing waits.
   */
  replicaAcks?: { min: number | undefined; timeoutMs: number };
}

/**
 * Stored on the primary, not confirmed by enough replicas in time: a failover could lose it, so it is not acknowledged.
 */
export class ReplicaAckError extends Error {
  constructor(confirmed: number, required: number, timeoutMs: number) {
    super(
      `the events were stored on the Redis primary, but ${confirmed} of the ${required} replica(s) required confirmed them within ${timeoutMs} ms`,
    );
    this.name = 'ReplicaAckError';
  }
}

/** How long the primary's count of replicas is trusted before INFO is asked again. */
const REPLICA_COUNT_TTL_MS = 5000;

function toStored([id, list]: StreamEntry): StoredEvent {
  const fields: Record<string, string> = {};
  for (let i = 0; i + 1 < list.length; i += 2) fields[list[i]!] = list[i + 1]!;
  return {
    seq: Number(id.slice(0, id.indexOf('-'))),
    uid: fields.uid!,
    name: fields.name!,
    statusText: fields.status ?? null,
    receivedAt: fields.at!,
    ...flagsOf(Number(fields.stale)),
    payload: JSON.parse(fields.payload!) as WireWebhookEvent,
    ...(fields.carried ? { carried: JSON.parse(fields.carried) as JsonObject } : {}),
  };
}

/** What SQLite's `json_extract(payload, '$.driver_location.lat') IS NOT NULL` says. */
function carriesPosition(payload: WireWebhookEvent): boolean {
  const location = payload.driver_location as unknown;
  if (!location || typeof location !== 'object' || Array.isArray(location)) return false;
  const lat = (location as Record<string, unknown>).lat;
  return lat !== null && lat !== undefined;
}

/** One event's fixed arguments to the APPEND script, then its view fields (see the script's ARGV list). */
function appendArgs(
  payload: WireWebhookEvent,
  receivedAt: string,
  onlyIf: AppendCondition | undefined,
  token: string,
): string[] {
  const name = payload.event_name;
  const facts = factsOf(payload);
  const statusText = typeof payload.status === 'string' ? payload.status : null;
  const mover = moverFields(name, statusText);
  const view = viewFields(payload as unknown as JsonObject);
  const args = [
    `${fingerprint(payload)} ${name}`,
    token,
    facts.rank === undefined ? '' : String(facts.rank),
    flag(facts.moves),
    facts.final,
    flag(facts.provesPickup),
    flag(facts.dropoff),
    facts.read ? String(facts.read.basis) : '',
    flag(facts.read?.confirm === true),
    // SQLite's `name LIKE 'delivery.%'` ignores ASCII case.
    flag(name.toLowerCase().startsWith('delivery.')),
    flag(carriesPosition(payload)),
    payload.uid,
    name,
    flag(statusText !== null),
    statusText ?? '',
    receivedAt,
    JSON.stringify(payload),
    facts.courier ? courierJson(facts.courier) : '',
    mover.eventName,
    mover.label,
    String(view.length),
    onlyIf ?? '',
    ...view.flat(),
  ];
  // Out of step with the script, these arguments would be read shifted, and so would every later event's.
  if (args.length !== APPEND_FIELDS + 2 * view.length)
    throw new Error(
      `APPEND takes ${APPEND_FIELDS} fixed arguments per event, ${args.length - 2 * view.length} were built`,
    );
  return args;
}

export class RedisStore extends RedisRecords implements Store {
  readonly [REDIS_STORE] = true;
  readonly #ownsClient: boolean;
  readonly #trims: TrimSchedule | undefined;
  #cursorSecret: Promise<Buffer> | undefined;
  readonly #replicaAcks: RedisStoreOptions['replicaAcks'];
  readonly #logger: Logger | undefined;
  /**
   * With replica acks: the connection every batch of events is written and
   * WAITed on (WAIT counts the writes of its own connection, and blocks it, so
   * the other commands do not queue behind it).
   */
  #writer: Redis | undefined;
  #replicaCount: { count: number; at: number } | undefined;
  /** Batches stored but refused for want of replica confirmations, for /metrics. */
  readonly counters = { replicaAckFailures: 0 };

  constructor(client: Redis, options: RedisStoreOptions = {}) {
    super(client, options.prefix ?? 'dg:', options.retention);
    this.#replicaAcks = options.replicaAcks;
    this.#logger = options.logger;
    this.#ownsClient = options.ownsClient ?? false;
    this.#trims =
      options.retention &&
      new TrimSchedule((stopping) => this.#trim(stopping), trimIntervalMs(options.retention), options.logger);
    defineScripts(client);
  }

  /** Opens its own client on `url`. */
  static connect(connection: RedisConnection, options: Omit<RedisStoreOptions, 'ownsClient'> = {}): RedisStore {
    const client = connectRedis(connection, 'delivery-graph:store');
    logConnection(client, 'store', options.logger);
    return new RedisStore(client, { ...options, ownsClient: true });
  }

  /** The pub/sub channel events of this store are published on. */
  get channel(): string {
    return `${this.prefix}events`;
  }

  get #log(): string {
    return `${this.prefix}log`;
  }

  appendEvents(events: ReadonlyArray<ReceivedEvent>): Promise<AppendResult[]>;
  appendEvents(events: ReadonlyArray<EventInput>): Promise<Array<AppendResult | NotStored>>;
  async appendEvents(events: ReadonlyArray<EventInput>): Promise<Array<AppendResult | NotStored>> {
    if (events.length === 0) return [];
    // The whole batch in one script call, in order: one round trip, and ranks compared
    // against what the same batch already wrote. Resolves once Redis answered.
    const token = randomBytes(9).toString('base64url');
    // An event whose arguments cannot even be built fails alone; the others still go.
    const outcomes = new Array<AppendResult | NotStored | Error>(events.length);
    const sent: number[] = [];
    const keys: string[] = [];
    const args: string[] = [];
    for (const [index, { payload, receivedAt, onlyIf }] of events.entries()) {
      let eventKeys: string[];
      let eventArgs: string[];
      try {
        const delivery = this.deliveryKeys(payload.uid);
        eventKeys = [delivery.state, delivery.events, delivery.dedup];
        eventArgs = appendArgs(payload, receivedAt, onlyIf, `${token}.${index}`);
      } catch (error) {
        outcomes[index] = error instanceof Error ? error : new Error(String(error));
        continue;
      }
      keys.push(...eventKeys);
      args.push(...eventArgs);
      sent.push(index);
    }
    if (sent.length > 0) {
      const required = await this.#requiredReplicas();
      const writer = required > 0 ? this.#writerClient() : this.client;
      const [seqKey, ranks] = [`${this.prefix}seq`, [String(DELIVERED_RANK), String(NOT_DELIVERED_RANK)]];
      const pipeline = writer
        .pipeline()
        .dgAppend(String(keys.length + 2), seqKey, this.#log, ...keys, ...ranks, ...args);
      const uids = new Set(sent.map((index) => events[index]!.payload.uid));
      const [appended, ...proofs] = (await this.#prove(pipeline, uids).exec())!;
      if (appended![0]) throw appended![0];
      const answers = appended![1] as Awaited<ReturnType<Redis['dgAppend']>>;
      const unproved = proofs.find(([error]) => error)?.[0];
      if (unproved) this.#logger?.warn({ err: unproved }, 'could not prove the owner records of stored events');
      if (required > 0)
        await this.#confirmed(
          writer,
          required,
          answers.some((answer) => answer[0] === 1),
        );
      answers.forEach((answer, position) => {
        const index = sent[position]!;
        if (answer[0] === -1) {
          outcomes[index] = new Error(`Redis could not store the event: ${answer[1]}`);
        } else if (answer[0] === 0) {
          const { payload, receivedAt } = events[index]!;
          const statusText = typeof payload.status === 'string' ? payload.status : null;
          const event: StoredEvent = {
            seq: Number(answer[1]),
            uid: payload.uid,
            name: payload.event_name,
            statusText,
            receivedAt,
            ...flagsOf(answer[2]),
            payload,
          };
          if (answer[3]) event.carried = JSON.parse(answer[3]) as JsonObject;
          outcomes[index] = { event, duplicate: false };
        } else if (answer[0] === 3) {
          outcomes[index] = { skipped: true };
        } else {
          outcomes[index] = { event: toStored(answer[1]), duplicate: answer[0] === 1 };
        }
      });
    }
    if (outcomes.some((outcome) => outcome instanceof Error)) {
      // Every event failing is Redis failing (out of memory, a script error): the whole batch fails as before.
      if (outcomes.every((outcome) => outcome instanceof Error)) throw outcomes[0];
      throw new PartialAppendError(outcomes);
    }
    return outcomes as Array<AppendResult | NotStored>;
  }

  /**
   * Each delivery's events prove its owner record (it lives on from now), in the append's round trip. A proof that
   * fails fails no event: the record then counts from its last proof.
   */
  #prove(pipeline: ReturnType<Redis['pipeline']>, uids: ReadonlySet<string>): ReturnType<Redis['pipeline']> {
    const retention = this.retention;
    if (!retention) return pipeline;
    const [ttl, step] = [String(retention.eventRetentionMs), String(proofRefreshMs(retention))];
    for (const uid of uids) pipeline.dgProve(this.ownerKey(uid), ttl, step, this.prefix);
    return pipeline;
  }

  /**
   * REDIS_MIN_REPLICAS_ACK, or by default 1 when the primary has a replica (asked with INFO at most every few seconds).
   */
  async #requiredReplicas(): Promise<number> {
    const acks = this.#replicaAcks;
    if (!acks) return 0;
    if (acks.min !== undefined) return acks.min;
    const now = Date.now();
    if (!this.#replicaCount || now - this.#replicaCount.at > REPLICA_COUNT_TTL_MS) {
      // On the shared connection: the writer's is made only once there is a replica to wait for.
      const info = await this.client.info('replication');
      const count = Number(/^connected_slaves:(\d+)/m.exec(info)?.[1] ?? 0);
      this.#replicaCount = { count, at: now };
    }
    return this.#replicaCount.count > 0 ? 1 : 0;
  }

  #writerClient(): Redis {
    if (!this.#writer) {
      const timeoutMs = this.#replicaAcks?.timeoutMs ?? 0;
      this.#writer = this.client.duplicate({
        connectionName: 'delivery-graph:writer',
        commandTimeout: timeoutMs + 5000,
      });
      defineAppendScripts(this.#writer);
      logConnection(this.#writer, 'writer', this.#logger);
    }
    return this.#writer;
  }

  /**
   * Waits until `required` replicas have every write before this point. A batch
   * of duplicates alone wrote nothing of its own, and WAIT counts from this
   * connection's last write: one small write first puts that at the end of the
   * replication stream, so the earlier write of the events it found (made
   * through another connection, perhaps another instance) is covered too.
   */
  async #confirmed(writer: Redis, required: number, foundDuplicates: boolean): Promise<void> {
    const timeoutMs = this.#replicaAcks!.timeoutMs;
    if (foundDuplicates) await writer.incr(`${this.prefix}replica-acks`);
    const confirmed = await writer.wait(required, timeoutMs);
    if (confirmed >= required) return;
    this.counters.replicaAckFailures += 1;
    // Fewer replicas than thought (one left, or a failover): counted again next time.
    this.#replicaCount = undefined;
    throw new ReplicaAckError(confirmed, required, timeoutMs);
  }

  async eventsAfter(afterSeq: number, limit: number, filter: EventFilter = {}): Promise<StoredEvent[]> {
    if (limit <= 0) return [];
    const after = Math.max(0, Math.floor(afterSeq));
    const uids = filter.uids;
    if (uids && uids.length > 0) {
      const keys = [...new Set(uids)].map((uid) => this.deliveryKeys(uid).events);
      const entries = await this.client.dgEventsOf(
        String(keys.length + 1),
        this.#log,
        ...keys,
        String(after),
        String(limit),
      );
      return entries.map(toStored);
    }
    const entries = (await this.client.xrange(this.#log, `${after + 1}-0`, '+', 'COUNT', limit)) as StreamEntry[];
    return entries.map(toStored);
  }

  async latestEvent(uid: string, kind: 'delivery' | 'location'): Promise<StoredEvent | undefined> {
    const entry = await this.client.dgLatest(this.deliveryKeys(uid).state, this.#log, kind);
    return entry ? toStored(entry) : undefined;
  }

  async deliveryState(uid: string): Promise<DeliveryState | undefined> {
    const [rank, terminal, seq, courier, formers, pickedUp] = await this.client.hmget(
      this.deliveryKeys(uid).state,
      'rank',
      'terminal',
      'seq',
      'courier',
      'formers',
      'pickedUp',
    );
    if (rank === null) return undefined;
    return {
      rank: Number(rank),
      terminal: terminal === '1',
      ...(pickedUp === '1' ? { pickedUp: true as const } : {}),
      seq: Number(seq),
      ...courierPart(courier, formers),
    };
  }

  async deliveryView(uid: string): Promise<JsonObject | undefined> {
    const hash = await this.client.hgetall(this.deliveryKeys(uid).state);
    if (hash.rank === undefined) return undefined;
    const view: StoredView = {};
    for (const [field, json] of Object.entries(hash)) if (field.startsWith('v:')) view[field.slice(2)] = json;
    return viewBody(uid, view);
  }

  async recordRead({ uid, body, basis, readAt }: ReadRecord): Promise<void> {
    const fields = viewFields(body);
    const { state, events } = this.deliveryKeys(uid);
    const ttl = this.retention ? String(this.retention.eventRetentionMs) : '';
    const status = deliveryStatus(body.status);
    const [, [, terminal], [, record]] = (await this.client
      .pipeline()
      .dgMergeRead(
        state,
        events,
        String(basis),
        ttl,
        String(readAt ?? Date.now()),
        String(statusRank(status) ?? ''),
        ...(fields.length > 0 ? fields.flat() : []),
      )
      .hget(state, 'terminal')
      .get(this.ownerKey(uid))
      .exec())! as [unknown, [unknown, string | null], [unknown, string | null]];
    // A read may take a final state back (it settles a contradiction): the delivery is unfinished again.
    if (terminal !== '1' && record) await this.client.zadd(this.unfinishedKey(record.split(' ')[0]!), 'NX', 0, uid);
  }

  async confirmedViews(uids: readonly string[]): Promise<Map<string, ConfirmedView>> {
    const views = new Map<string, ConfirmedView>();
    if (uids.length === 0) return views;
    const keys = uids.map((uid) => this.deliveryKeys(uid).state);
    const rows = await this.client.dgConfirmed(String(keys.length + 1), this.#log, ...keys);
    rows.forEach(([flat, deliveryAt, locationAt], index) => {
      const view = confirmedViewOf(uids[index]!, flat, [deliveryAt, locationAt]);
      if (view) views.set(uids[index]!, view);
    });
    return views;
  }

  /** The counter the append script INCRs with each XADD: trimming the log does not lower it. */
  async lastSeq(): Promise<number> {
    return Number((await this.client.get(`${this.prefix}seq`)) ?? 0);
  }

  async claimIdempotency(ownerHash: string, idempotencyKey: string, fingerprint: string): Promise<IdempotencyClaim> {
    const token = randomBytes(9).toString('base64url');
    const answer = await this.client.dgClaim(
      this.idemKey(ownerHash, idempotencyKey),
      this.markerKey(bookingMarker(ownerHash, idempotencyKey)),
      this.historyKey(ownerHash),
      fingerprint,
      String(Date.now()),
      String(PENDING_EXPIRY_MS),
      token,
      this.idemTtl,
      ownerHash,
    );
    return claimOf(answer);
  }

  async markIdempotencyUnknown(ownerHash: string, idempotencyKey: string): Promise<IdempotencyClaim> {
    const answer = await this.client.dgUnknown(
      this.idemKey(ownerHash, idempotencyKey),
      this.markerKey(bookingMarker(ownerHash, idempotencyKey)),
      String(Date.now()),
      this.idemTtl,
    );
    return claimOf(answer);
  }

  async resolveBookingMarker(marker: string, result: BookingResult): Promise<string | undefined> {
    const key = await this.client.get(this.markerKey(marker));
    if (key === null) return undefined;
    const owner = await this.client.dgResolve(
      key,
      result.uid,
      flag(result.trackingUrl !== null),
      result.trackingUrl ?? '',
      String(Date.now()),
      this.retention ? String(this.retention.idempotencyRetentionMs) : '',
    );
    return owner ?? undefined;
  }

  async completeIdempotency(ownerHash: string, idempotencyKey: string, result: BookingResult): Promise<void> {
    await this.client.dgComplete(
      this.idemKey(ownerHash, idempotencyKey),
      result.uid,
      flag(result.trackingUrl !== null),
      result.trackingUrl ?? '',
      String(Date.now()),
      this.retention ? String(this.retention.idempotencyRetentionMs) : '',
    );
  }

  async releaseIdempotency(ownerHash: string, idempotencyKey: string): Promise<void> {
    await this.client.dgRelease(this.idemKey(ownerHash, idempotencyKey), this.historyKey(ownerHash));
  }

  async ping(): Promise<void> {
    try {
      await this.client.ping();
    } catch (error) {
      // /ready says what is wrong in our words, not ioredis's.
      throw new Error(redisFailure(error, this.client), { cause: error });
    }
  }

  cursorSecret(): Promise<Buffer> {
    this.#cursorSecret ??= (async () => {
      const key = `${this.prefix}cursor-secret`;
      // The first instance to ask sets it; every other one, now or later, reads the same.
      await this.client.set(key, randomBytes(32).toString('base64url'), 'NX');
      const secret = await this.client.get(key);
      if (!secret) throw new Error('Redis did not keep the cursor secret');
      return Buffer.from(secret, 'base64url');
    })().catch((error: unknown) => {
      // Asked again next time: Redis may be back.
      this.#cursorSecret = undefined;
      throw error;
    });
    return this.#cursorSecret;
  }

  /**
   * Deletes now what is past its retention (a timer does it every interval); never two passes at once in this process.
   */
  trimExpired(): Promise<void> {
    return this.#trims?.run() ?? Promise.resolve();
  }

  /**
   * One trim pass, under a lease so that instances sharing the Redis take turns.
   * Idempotency and ownership keys expire by TTL; the log is trimmed here, in
   * steps of TRIM_BATCH entries: each step a read of the head without payloads,
   * one pipeline of FORGET scripts (one per delivery), then XTRIM MINID.
   */
  async #trim(stopping: () => boolean): Promise<void> {
    const lease = `${this.prefix}trim`;
    const token = randomBytes(9).toString('base64url');
    if ((await this.client.set(lease, token, 'PX', TRIM_LEASE_MS, 'NX')) === null) return;
    try {
      for (;;) {
        if (stopping()) return;
        const cutoff = Date.now() - this.retention!.eventRetentionMs;
        const head = await this.client.dgLogHead(this.#log, String(TRIM_BATCH));
        // In seq order, which is the order of arrival: only the leading expired entries go.
        let upTo = 0;
        const uids = new Set<string>();
        for (let i = 0; i + 2 < head.length; i += 3) {
          // A time that does not parse cannot be aged; it must not hold the log back either.
          if (Date.parse(head[i + 1]!) >= cutoff) break;
          upTo = Number(head[i]);
          uids.add(head[i + 2]!);
        }
        if (upTo === 0) return;
        const pipeline = this.client.pipeline();
        for (const uid of uids) {
          const keys = this.deliveryKeys(uid);
          pipeline.dgForget(keys.state, keys.events, keys.dedup, String(upTo));
        }
        for (const [error] of (await pipeline.exec()) ?? []) if (error) throw error;
        await this.client.xtrim(this.#log, 'MINID', `${upTo + 1}-0`);
        await yieldToEventLoop();
      }
    } finally {
      await this.client.dgUnlease(lease, token).catch(() => undefined);
    }
  }

  /** Stops the trim schedule (waiting for a pass in progress), then quits the client if the store opened it. */
  async close(): Promise<void> {
    await this.#trims?.stop();
    // The writer is this store's own, whoever owns the client.
    this.#writer?.disconnect();
    if (!this.#ownsClient || this.client.status === 'end') return;
    // QUIT lets answers in flight arrive; on a connection that is down there are none to wait for.
    if (this.client.status === 'ready') await this.client.quit().catch(() => this.client.disconnect());
    else this.client.disconnect();
  }
}

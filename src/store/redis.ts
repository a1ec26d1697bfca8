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
import { DELIVERED_RANK, factsOf, NOT_DELIVERED_RANK } from '../domain/milestones.js';
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
  type MerchantLink,
  type MerchantMerge,
  type NotStored,
  OWNER_CLAIMS_KEPT,
  type OwnerClaims,
  type OwnerEntry,
  type OwnerGroup,
  type OwnerProof,
  type OwnerRecord,
  type ReadRecord,
  type ReceivedEvent,
  type Store,
  type StoredEvent,
  merchantScoped,
  type UnfinishedDelivery,
  type UnfinishedPage,
} from './store.js';
import { fingerprint } from '../domain/canonical-json.js';
import { bookingMarker } from '../domain/booking-marker.js';
import { APPEND_FIELDS, defineAppendScripts, defineScripts, type StreamEntry } from './redis-scripts.js';

/** A claim as the CLAIM and UNKNOWN scripts answer it. */
function claimOf([state, first, second]: [string, string?, string?]): IdempotencyClaim {
  if (state === 'done') return { state, result: { uid: first!, trackingUrl: second ?? null } };
  if (state === 'unknown') return { state, since: new Date(Number(first)) };
  return { state: state as 'claimed' | 'pending' | 'conflict' };
}

/** Links followed at most, as in the SQLite store (sqlite-writer.ts). */
const MAX_LINK_DEPTH = 16;

/** The owner value's proof, when it names one this version knows. */
const OWNER_PROOFS: ReadonlySet<string> = new Set<OwnerProof>(['booked', 'reference', 'canceled', 'claimed', 'read']);

/** Members of an owner's set one page looks at, at most. */
const UNFINISHED_SCAN = 200;

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

const flag = (value: boolean) => (value ? '1' : '0');

/** A literal for a SCAN MATCH pattern: its glob characters escaped. */
const globEscape = (text: string) => text.replace(/[*?[\]\\]/g, '\\$&');

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

export class RedisStore implements Store {
  readonly client: Redis;
  readonly prefix: string;
  readonly #ownsClient: boolean;
  readonly #retention: Retention | undefined;
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
  /** Filled in once: the history of merchants from data written before histories were kept (#historyKept). */
  #historyFilled: Promise<void> | undefined;
  /** What this instance's read leases hold: the leases it took are its own to take again and to give back. */
  readonly #leaseToken = randomBytes(9).toString('base64url');

  constructor(client: Redis, options: RedisStoreOptions = {}) {
    this.client = client;
    this.#replicaAcks = options.replicaAcks;
    this.#logger = options.logger;
    this.prefix = options.prefix ?? 'dg:';
    this.#ownsClient = options.ownsClient ?? false;
    this.#retention = options.retention;
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

  #delivery(uid: string) {
    const base = `${this.prefix}delivery:${uid}`;
    return { state: base, events: `${base}:events`, dedup: `${base}:dedup` };
  }

  get #log(): string {
    return `${this.prefix}log`;
  }

  #idem(ownerHash: string, idempotencyKey: string): string {
    return `${this.prefix}idem:${ownerHash}:${idempotencyKey}`;
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
        const delivery = this.#delivery(payload.uid);
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
    const retention = this.#retention;
    if (!retention) return pipeline;
    const [ttl, step] = [String(retention.eventRetentionMs), String(proofRefreshMs(retention))];
    for (const uid of uids) pipeline.dgProve(this.#owner(uid), ttl, step, this.prefix);
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
      const keys = [...new Set(uids)].map((uid) => this.#delivery(uid).events);
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
    const entry = await this.client.dgLatest(this.#delivery(uid).state, this.#log, kind);
    return entry ? toStored(entry) : undefined;
  }

  async deliveryState(uid: string): Promise<DeliveryState | undefined> {
    const [rank, terminal, seq, courier, formers, pickedUp] = await this.client.hmget(
      this.#delivery(uid).state,
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
    const hash = await this.client.hgetall(this.#delivery(uid).state);
    if (hash.rank === undefined) return undefined;
    const view: StoredView = {};
    for (const [field, json] of Object.entries(hash)) if (field.startsWith('v:')) view[field.slice(2)] = json;
    return viewBody(uid, view);
  }

  async recordRead({ uid, body, basis }: ReadRecord): Promise<void> {
    const fields = viewFields(body);
    const { state, events } = this.#delivery(uid);
    const ttl = this.#retention ? String(this.#retention.eventRetentionMs) : '';
    const [, [, terminal], [, record]] = (await this.client
      .pipeline()
      .dgMergeRead(state, events, String(basis), ttl, ...(fields.length > 0 ? fields.flat() : []))
      .hget(state, 'terminal')
      .get(this.#owner(uid))
      .exec())! as [unknown, [unknown, string | null], [unknown, string | null]];
    // A read may take a final state back (it settles a contradiction): the delivery is unfinished again.
    if (terminal !== '1' && record) await this.client.zadd(this.#unfinished(record.split(' ')[0]!), 'NX', 0, uid);
  }

  /** The counter the append script INCRs with each XADD: trimming the log does not lower it. */
  async lastSeq(): Promise<number> {
    return Number((await this.client.get(`${this.prefix}seq`)) ?? 0);
  }

  #marker(marker: string): string {
    return `${this.prefix}idem-marker:${marker}`;
  }

  /** A claim in flight or unknown outlives its pending expiry, whatever the retention. */
  get #idemTtl(): string {
    return this.#retention ? String(Math.max(this.#retention.idempotencyRetentionMs, PENDING_EXPIRY_MS)) : '';
  }

  async claimIdempotency(ownerHash: string, idempotencyKey: string, fingerprint: string): Promise<IdempotencyClaim> {
    const token = randomBytes(9).toString('base64url');
    const answer = await this.client.dgClaim(
      this.#idem(ownerHash, idempotencyKey),
      this.#marker(bookingMarker(ownerHash, idempotencyKey)),
      this.#history(ownerHash),
      fingerprint,
      String(Date.now()),
      String(PENDING_EXPIRY_MS),
      token,
      this.#idemTtl,
      ownerHash,
    );
    return claimOf(answer);
  }

  async markIdempotencyUnknown(ownerHash: string, idempotencyKey: string): Promise<IdempotencyClaim> {
    const answer = await this.client.dgUnknown(
      this.#idem(ownerHash, idempotencyKey),
      this.#marker(bookingMarker(ownerHash, idempotencyKey)),
      String(Date.now()),
      this.#idemTtl,
    );
    return claimOf(answer);
  }

  async resolveBookingMarker(marker: string, result: BookingResult): Promise<string | undefined> {
    const key = await this.client.get(this.#marker(marker));
    if (key === null) return undefined;
    const owner = await this.client.dgResolve(
      key,
      result.uid,
      flag(result.trackingUrl !== null),
      result.trackingUrl ?? '',
      String(Date.now()),
      this.#retention ? String(this.#retention.idempotencyRetentionMs) : '',
    );
    return owner ?? undefined;
  }

  async completeIdempotency(ownerHash: string, idempotencyKey: string, result: BookingResult): Promise<void> {
    await this.client.dgComplete(
      this.#idem(ownerHash, idempotencyKey),
      result.uid,
      flag(result.trackingUrl !== null),
      result.trackingUrl ?? '',
      String(Date.now()),
      this.#retention ? String(this.#retention.idempotencyRetentionMs) : '',
    );
  }

  async releaseIdempotency(ownerHash: string, idempotencyKey: string): Promise<void> {
    await this.client.dgRelease(this.#idem(ownerHash, idempotencyKey), this.#history(ownerHash));
  }

  async recordOwner(uid: string, owner: string, group?: OwnerGroup, proof?: OwnerProof): Promise<void> {
    await this.recordOwners([{ uid, owner, group: group ?? null, proof }]);
  }

  async recordOwners(records: readonly OwnerEntry[]): Promise<void> {
    // One round trip; the script keeps the first record but for what supersedes() lets replace it, and a record written
    // joins its owner's unfinished set.
    const pipeline = this.client.pipeline();
    const now = Date.now();
    const ttl = this.#retention ? String(this.#retention.eventRetentionMs) : '';
    for (const { uid, owner, group, proof, replace } of records) {
      const value = `${owner} ${group ?? '-'} ${proof ?? 'read'} ${now}`;
      pipeline.dgOwn(
        this.#owner(uid),
        this.#unfinished(owner),
        this.#history(owner),
        this.#ownerClaims,
        `${this.#ownerClaims}:version`,
        value,
        flag(merchantScoped(proof ?? 'read')),
        flag(replace === true),
        ttl,
        uid,
        String(OWNER_CLAIMS_KEPT),
      );
    }
    const results = await pipeline.exec();
    const failed = results?.find(([error]) => error);
    if (failed) throw failed[0];
  }

  #owner(uid: string): string {
    return `${this.prefix}owner:${uid}`;
  }

  get #ownerClaims(): string {
    return `${this.prefix}owner-claims`;
  }

  async ownerClaimsAfter(after: number | undefined): Promise<OwnerClaims> {
    const [version, complete, ...uids] = await this.client.dgOwnerClaims(
      this.#ownerClaims,
      `${this.#ownerClaims}:version`,
      after === undefined ? '' : String(after),
    );
    return { version, uids: complete === 1 ? uids : undefined };
  }

  #unfinished(owner: string): string {
    return `${this.prefix}unfinished:${owner}`;
  }

  /**
   * Looks at up to UNFINISHED_SCAN members of the owner's set in uid order, and
   * drops those found final or expired on the way; the cursor is the last uid looked at.
   */
  async unfinishedDeliveries(
    owner: string,
    after: string | undefined,
    { limit, since }: { limit: number; since: number },
  ): Promise<UnfinishedPage> {
    const set = this.#unfinished(owner);
    const scan = Math.max(limit, UNFINISHED_SCAN);
    const uids = await this.client.zrangebylex(set, after === undefined ? '-' : `(${after}`, '+', 'LIMIT', 0, scan);
    if (uids.length === 0) return { deliveries: [], next: undefined };
    const pipeline = this.client.pipeline();
    for (const uid of uids)
      pipeline.dgUnfinished(set, this.#owner(uid), this.#delivery(uid).state, uid, owner, String(since));
    const results = (await pipeline.exec()) ?? [];
    const deliveries: UnfinishedDelivery[] = [];
    for (const [index, [error, group]] of results.entries()) {
      if (error) throw error;
      if (group === null || group === undefined) continue;
      deliveries.push({ uid: uids[index]!, group: group === 'PLATFORM' || group === 'PARTNER' ? group : null });
      if (deliveries.length === limit) return { deliveries, next: uids[index] };
    }
    return { deliveries, next: uids.length === scan ? uids.at(-1) : undefined };
  }

  /** SET NX with a time to live, one per lease, in one round trip. */
  async leaseReads(leases: readonly string[], forMs: number): Promise<Set<string>> {
    const taken = new Set<string>();
    if (leases.length === 0) return taken;
    const pipeline = this.client.pipeline();
    const ttl = String(Math.max(1, Math.round(forMs)));
    for (const lease of leases) pipeline.dgLease(this.#readLease(lease), this.#leaseToken, ttl);
    const results = (await pipeline.exec()) ?? [];
    results.forEach(([error, answer], index) => {
      if (error) throw error;
      if (answer === 1) taken.add(leases[index]!);
    });
    return taken;
  }

  async releaseReads(leases: readonly string[]): Promise<void> {
    if (leases.length === 0) return;
    const pipeline = this.client.pipeline();
    for (const lease of leases) pipeline.dgUnlease(this.#readLease(lease), this.#leaseToken);
    for (const [error] of (await pipeline.exec()) ?? []) if (error) throw error;
  }

  #readLease(lease: string): string {
    return `${this.prefix}read-lease:${lease}`;
  }

  async ownerOf(uid: string): Promise<string | undefined> {
    return (await this.ownersOf([uid])).get(uid)?.owner;
  }

  async ownersOf(uids: readonly string[]): Promise<Map<string, OwnerRecord>> {
    const found = new Map<string, OwnerRecord>();
    if (uids.length === 0) return found;
    const values = await this.client.mget(uids.map((uid) => this.#owner(uid)));
    values.forEach((value, index) => {
      if (value === null) return;
      // The time it was recorded, fourth, is reconciliation's (unfinishedDeliveries).
      const [owner, group, proof] = value.split(' ');
      found.set(uids[index]!, {
        owner: owner!,
        group: group === 'PLATFORM' || group === 'PARTNER' ? group : null,
        proof: proof !== undefined && OWNER_PROOFS.has(proof) ? (proof as OwnerProof) : null,
      });
    });
    return found;
  }

  #link(id: string): string {
    return `${this.prefix}merchant-link:${id}`;
  }

  async merchantLinks(ids: readonly string[]): Promise<Map<string, string>> {
    const found = new Map<string, string>();
    if (ids.length === 0) return found;
    const values = await this.client.mget(ids.map((id) => this.#link(id)));
    values.forEach((value, index) => {
      if (value !== null) found.set(ids[index]!, value);
    });
    return found;
  }

  #history(id: string): string {
    return `${this.prefix}merchant-history:${id}`;
  }

  async linkMerchant(key: string, previous: string): Promise<MerchantLink> {
    await this.#historyKept();
    const [outcome, merchant] = await this.client.dgLink(key, previous, this.prefix, String(MAX_LINK_DEPTH));
    if (outcome === 'refused') return { outcome };
    return { outcome: outcome as 'linked' | 'same', merchant: merchant! };
  }

  /**
   * The link in one script; then what was recorded under the ids that lead to
   * the merchant moved to it, a claim or record at a time (a SCAN of the claims
   * of each id, and of every owner record: an operator's command, run rarely).
   */
  async mergeMerchant(from: string, into: string): Promise<MerchantMerge> {
    await this.#historyKept();
    const [merchant, merged, ...ids] = await this.client.dgMergeLink(from, into, this.prefix, String(MAX_LINK_DEPTH));
    const outcome: MerchantMerge = {
      merchant: merchant!,
      merged: merged || undefined,
      records: 0,
      claims: 0,
      conflicts: 0,
    };
    for (const id of ids) {
      const claimPrefix = this.#idem(id, '');
      for await (const names of this.client.scanStream({
        match: `${globEscape(claimPrefix)}*`,
        count: 1000,
      }) as AsyncIterable<string[]>) {
        for (const name of names) {
          const idempotencyKey = name.slice(claimPrefix.length);
          const moved = await this.client.dgMoveClaim(
            name,
            this.#idem(merchant!, idempotencyKey),
            this.#marker(bookingMarker(id, idempotencyKey)),
            this.#history(id),
            this.#history(merchant!),
            merchant!,
          );
          if (moved === 1) outcome.claims += 1;
          else if (moved === 2) outcome.conflicts += 1;
        }
      }
    }
    const linked = new Set(ids);
    if (linked.size === 0) return outcome;
    const recordPrefix = this.#owner('');
    for await (const names of this.client.scanStream({
      match: `${globEscape(recordPrefix)}*`,
      count: 1000,
    }) as AsyncIterable<string[]>) {
      if (names.length === 0) continue;
      const values = await this.client.mget(names);
      for (const [index, value] of values.entries()) {
        const owner = value?.split(' ')[0];
        if (owner === undefined || !linked.has(owner)) continue;
        const uid = names[index]!.slice(recordPrefix.length);
        outcome.records += await this.client.dgMoveRecord(
          names[index]!,
          this.#unfinished(owner),
          this.#unfinished(merchant!),
          this.#history(merchant!),
          owner,
          merchant!,
          uid,
        );
      }
    }
    return outcome;
  }

  async unlinkMerchant(id: string): Promise<boolean> {
    return (await this.client.dgUnlink(this.#link(id), id, this.prefix)) > 0;
  }

  /**
   * Data written before merchant histories were kept has none: once per data set
   * (and per process until then), before the first link, each owner record, claim
   * and link gives its merchant the history it would have had. Run twice at once,
   * a claim may be counted twice: a history too many refuses a link, never loses one.
   */
  #historyKept(): Promise<void> {
    this.#historyFilled ??= this.#fillHistory().catch((error: unknown) => {
      this.#historyFilled = undefined;
      throw error;
    });
    return this.#historyFilled;
  }

  async #fillHistory(): Promise<void> {
    const ready = `${this.prefix}merchant-history-ready`;
    if ((await this.client.exists(ready)) === 1) return;
    const records = this.#retention ? String(this.#retention.eventRetentionMs) : '';
    const claims = this.#idemTtl;
    const each = async (
      prefix: string,
      fill: (names: string[], pipeline: ReturnType<Redis['pipeline']>) => Promise<void>,
    ) => {
      for await (const names of this.client.scanStream({
        match: `${globEscape(prefix)}*`,
        count: 1000,
      }) as AsyncIterable<string[]>) {
        if (names.length === 0) continue;
        const pipeline = this.client.pipeline();
        await fill(names, pipeline);
        for (const [error] of (await pipeline.exec()) ?? []) if (error) throw error;
      }
    };
    await each(this.#owner(''), async (names, pipeline) => {
      for (const value of await this.client.mget(names))
        if (value) pipeline.dgHistory(this.#history(value.split(' ')[0]!), 'records', '', records);
    });
    const claimPrefix = `${this.prefix}idem:`;
    await each(claimPrefix, async (names, pipeline) => {
      const owners = await Promise.all(names.map((name) => this.client.hget(name, 'owner')));
      // A claim from before owners were kept in it: the owner is the name's first part (a hash, no colon).
      owners.forEach((owner, index) =>
        pipeline.dgHistory(
          this.#history(owner ?? names[index]!.slice(claimPrefix.length).split(':')[0]!),
          'claims',
          '1',
          claims,
        ),
      );
    });
    const linkPrefix = this.#link('');
    await each(linkPrefix, async (names, pipeline) => {
      (await this.client.mget(names)).forEach(
        (to, index) => to && pipeline.sadd(`${this.prefix}merchant-keys:${to}`, names[index]!.slice(linkPrefix.length)),
      );
    });
    await this.client.set(ready, '1');
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
        const cutoff = Date.now() - this.#retention!.eventRetentionMs;
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
          const keys = this.#delivery(uid);
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

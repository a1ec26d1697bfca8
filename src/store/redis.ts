// The shared store: with REDIS_URL, every instance reads and writes one Redis.
// Same semantics as the SQLite store (sqlite.ts); what must be atomic there is
// one transaction, here one Lua script. Keys, under a prefix (default "dg:"):
//   seq                        counter, INCR'd by the append script
//   log                        stream of events; entry id "<seq>-0", so a cursor is String(seq)
//   delivery:<uid>             hash: rank, terminal, seq (the milestone state) and
//                              delivery, location (seq of the latest non-stale event of each kind)
//   delivery:<uid>:events      sorted set of the delivery's seqs (eventsAfter with uids)
//   delivery:<uid>:dedup       hash "<sha256 of canonical payload> <event name>" → "<seq> <append token>"
//   idem:<owner>:<key>         hash: fingerprint, state (pending|done), uid, trackingUrl, updatedAt, token
//   owner:<uid>                the owner hash of a delivery booked through the facade
// Nothing expires and the log is never trimmed, as in SQLite. All keys of one
// script are named in KEYS; they live in different slots, so Redis Cluster is not supported.
import { createHash, randomBytes } from 'node:crypto';
import { Redis, type RedisOptions, type Result } from 'ioredis';
import type { Logger } from '../logger.js';
import type { WireWebhookEvent } from '../upstream/wire.js';
import { eventFacts, PICKED_UP_RANK } from '../domain/milestones.js';
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

/** A stream entry as Redis returns it: [id, [field, value, field, value, …]]. */
type StreamEntry = [id: string, fields: string[]];

declare module 'ioredis' {
  interface RedisCommander<Context> {
    dgAppend(...args: string[]): Result<[0, string, number] | [1 | 2, StreamEntry], Context>;
    dgLatest(delivery: string, log: string, kind: string): Result<StreamEntry | null, Context>;
    dgEventsOf(...args: string[]): Result<StreamEntry[], Context>;
    dgClaim(key: string, fingerprint: string, now: string, expiryMs: string, token: string): Result<[string, string?, string?], Context>;
    dgComplete(key: string, uid: string, hasTrackingUrl: string, trackingUrl: string, now: string): Result<number, Context>;
    dgRelease(key: string): Result<number, Context>;
  }
}

/**
 * Judges the event exactly as judge() in src/domain/milestones.ts does, line for
 * line, from the facts eventFacts() gave the caller: the event's rank, whether it
 * moves the state, when it is final, and the rank that means "picked up". Then
 * appends and advances, all or nothing. A hit in the dedup hash with this call's
 * own token is a resend of this very append (ioredis resends unanswered commands
 * after a reconnect): not a duplicate.
 */
const APPEND = `
-- KEYS: 1 seq, 2 log, 3 delivery hash, 4 delivery events, 5 delivery dedup
-- ARGV: 1 dedup field, 2 token, 3 rank ('' when unknown), 4 moves the state,
--       5 final ('always', 'never' or 'before_pickup'), 6 picked-up rank,
--       7 counts for latestEvent 'delivery', 8 carries a position,
--       9 uid, 10 name, 11 has status text, 12 status text, 13 received at, 14 payload JSON
local seen = redis.call('HGET', KEYS[5], ARGV[1])
if seen then
  local seq, token = string.match(seen, '^(%d+) (.*)$')
  local entry = redis.call('XRANGE', KEYS[2], seq .. '-0', seq .. '-0')[1]
  if token == ARGV[2] then return {2, entry} end
  return {1, entry}
end
local state = redis.call('HMGET', KEYS[3], 'rank', 'terminal')
local current = tonumber(state[1])
local stale, moved, terminal = 0, 0, '0'
if current and state[2] == '1' then
  stale = 1
elseif ARGV[3] ~= '' then
  local rank = tonumber(ARGV[3])
  if current and (rank < current or (ARGV[4] == '1' and rank == current)) then
    stale = 1
  elseif ARGV[4] == '1' then
    moved = 1
    local pickedUp = current ~= nil and current >= tonumber(ARGV[6])
    if ARGV[5] == 'always' or (ARGV[5] == 'before_pickup' and not pickedUp) then terminal = '1' end
  end
end
local seq = string.format('%d', redis.call('INCR', KEYS[1]))
local fields = {'uid', ARGV[9], 'name', ARGV[10], 'at', ARGV[13], 'stale', stale, 'payload', ARGV[14]}
if ARGV[11] == '1' then
  fields[#fields + 1] = 'status'
  fields[#fields + 1] = ARGV[12]
end
redis.call('XADD', KEYS[2], seq .. '-0', unpack(fields))
redis.call('HSET', KEYS[5], ARGV[1], seq .. ' ' .. ARGV[2])
redis.call('ZADD', KEYS[4], seq, seq)
if stale == 0 then
  if moved == 1 then redis.call('HSET', KEYS[3], 'rank', ARGV[3], 'terminal', terminal, 'seq', seq) end
  if ARGV[7] == '1' then redis.call('HSET', KEYS[3], 'delivery', seq) end
  if ARGV[8] == '1' then redis.call('HSET', KEYS[3], 'location', seq) end
end
return {0, seq, stale}
`;

const LATEST = `
local seq = redis.call('HGET', KEYS[1], ARGV[1])
if not seq then return nil end
return redis.call('XRANGE', KEYS[2], seq .. '-0', seq .. '-0')[1]
`;

/** Per uid through its sorted set, then merged in log order, as the SQLite store does. */
const EVENTS_OF = `
-- KEYS: 1 log, 2.. delivery events; ARGV: 1 after seq, 2 limit
local limit = tonumber(ARGV[2])
local seqs = {}
for i = 2, #KEYS do
  for _, seq in ipairs(redis.call('ZRANGEBYSCORE', KEYS[i], '(' .. ARGV[1], '+inf', 'LIMIT', 0, limit)) do
    seqs[#seqs + 1] = seq
  end
end
table.sort(seqs, function(a, b) return tonumber(a) < tonumber(b) end)
local out = {}
for i = 1, math.min(limit, #seqs) do
  out[i] = redis.call('XRANGE', KEYS[1], seqs[i] .. '-0', seqs[i] .. '-0')[1]
end
return out
`;

/** A resend of the same claim (same token) is still this caller's claim. */
const CLAIM = `
-- ARGV: 1 fingerprint, 2 now (ms), 3 pending expiry (ms), 4 token
local r = redis.call('HMGET', KEYS[1], 'fingerprint', 'state', 'uid', 'trackingUrl', 'updatedAt', 'token')
if not r[1] then
  redis.call('HSET', KEYS[1], 'fingerprint', ARGV[1], 'state', 'pending', 'updatedAt', ARGV[2], 'token', ARGV[4])
  return {'claimed'}
end
if r[1] ~= ARGV[1] then return {'conflict'} end
if r[2] == 'done' then return {'done', r[3], r[4]} end
if r[6] == ARGV[4] then return {'claimed'} end
if tonumber(ARGV[2]) - tonumber(r[5]) > tonumber(ARGV[3]) then
  redis.call('HSET', KEYS[1], 'updatedAt', ARGV[2], 'token', ARGV[4])
  return {'claimed'}
end
return {'pending'}
`;

const COMPLETE = `
-- ARGV: 1 uid, 2 has tracking URL, 3 tracking URL, 4 now (ms)
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
redis.call('HSET', KEYS[1], 'state', 'done', 'uid', ARGV[1], 'updatedAt', ARGV[4])
if ARGV[2] == '1' then
  redis.call('HSET', KEYS[1], 'trackingUrl', ARGV[3])
else
  redis.call('HDEL', KEYS[1], 'trackingUrl')
end
return 1
`;

const RELEASE = `
if redis.call('HGET', KEYS[1], 'state') == 'pending' then return redis.call('DEL', KEYS[1]) end
return 0
`;

/**
 * Connection settings for every client of the facade. A command waits through at
 * most two reconnection attempts (a few hundred ms of outage) and then fails, so
 * a webhook is answered 503 instead of hanging; a Redis that accepts connections
 * but does not answer fails commands after commandTimeout.
 */
export function redisOptions(name: string): RedisOptions {
  return {
    connectionName: name,
    maxRetriesPerRequest: 2,
    retryStrategy: (attempt) => Math.min(attempt * 50, 1000),
    commandTimeout: 5000,
  };
}

/** Logs when a client loses and regains Redis, once per change, never with the URL (it may hold a password). */
export function logConnection(client: Redis, name: string, logger: Logger | undefined): void {
  let lost = false;
  client.on('error', (error: Error) => {
    if (!lost) logger?.warn({ redis: name, err: error.message }, 'redis connection error');
    lost = true;
  });
  client.on('ready', () => {
    if (lost) logger?.info({ redis: name }, 'redis connection ready again');
    lost = false;
  });
}

export interface RedisStoreOptions {
  /** Prefix of every key; several facades (or tests) can share one Redis with different prefixes. */
  prefix?: string;
  logger?: Logger;
  /** Quit the client on close() (the store opened it). */
  ownsClient?: boolean;
}

function toStored([id, list]: StreamEntry): StoredEvent {
  const fields: Record<string, string> = {};
  for (let i = 0; i + 1 < list.length; i += 2) fields[list[i]!] = list[i + 1]!;
  return {
    seq: Number(id.slice(0, id.indexOf('-'))),
    uid: fields.uid!,
    name: fields.name!,
    statusText: fields.status ?? null,
    receivedAt: fields.at!,
    stale: fields.stale === '1',
    payload: JSON.parse(fields.payload!) as WireWebhookEvent,
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

export class RedisStore implements Store {
  readonly client: Redis;
  readonly prefix: string;
  readonly #ownsClient: boolean;

  constructor(client: Redis, options: RedisStoreOptions = {}) {
    this.client = client;
    this.prefix = options.prefix ?? 'dg:';
    this.#ownsClient = options.ownsClient ?? false;
    client.defineCommand('dgAppend', { numberOfKeys: 5, lua: APPEND });
    client.defineCommand('dgLatest', { numberOfKeys: 2, lua: LATEST });
    client.defineCommand('dgEventsOf', { lua: EVENTS_OF });
    client.defineCommand('dgClaim', { numberOfKeys: 1, lua: CLAIM });
    client.defineCommand('dgComplete', { numberOfKeys: 1, lua: COMPLETE });
    client.defineCommand('dgRelease', { numberOfKeys: 1, lua: RELEASE });
  }

  /** Opens its own client on `url`. */
  static connect(url: string, options: Omit<RedisStoreOptions, 'ownsClient'> = {}): RedisStore {
    const client = new Redis(url, redisOptions('delivery-graph:store'));
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

  async appendEvents(events: ReadonlyArray<{ payload: WireWebhookEvent; receivedAt: string }>): Promise<AppendResult[]> {
    if (events.length === 0) return [];
    // One script per event, in order, in one pipeline: ranks are compared against
    // what the same batch already wrote. Resolves once Redis answered every one.
    const token = randomBytes(9).toString('base64url');
    const pipeline = this.client.pipeline();
    for (const [index, { payload, receivedAt }] of events.entries()) {
      const name = payload.event_name;
      const hash = createHash('sha256').update(canonicalJson(payload)).digest('hex');
      const keys = this.#delivery(payload.uid);
      const facts = eventFacts(name);
      const statusText = typeof payload.status === 'string' ? payload.status : null;
      pipeline.dgAppend(
        `${this.prefix}seq`,
        this.#log,
        keys.state,
        keys.events,
        keys.dedup,
        `${hash} ${name}`,
        `${token}.${index}`,
        facts.rank === undefined ? '' : String(facts.rank),
        flag(facts.moves),
        facts.final,
        String(PICKED_UP_RANK),
        // SQLite's `name LIKE 'delivery.%'` ignores ASCII case.
        flag(name.toLowerCase().startsWith('delivery.')),
        flag(carriesPosition(payload)),
        payload.uid,
        name,
        flag(statusText !== null),
        statusText ?? '',
        receivedAt,
        JSON.stringify(payload),
      );
    }
    const answers = await pipeline.exec();
    if (!answers) throw new Error('Redis pipeline was discarded');
    return answers.map(([error, reply], index): AppendResult => {
      if (error) throw error;
      const answer = reply as [0, string, number] | [1 | 2, StreamEntry];
      if (answer[0] === 0) {
        const { payload, receivedAt } = events[index]!;
        const statusText = typeof payload.status === 'string' ? payload.status : null;
        const event = { seq: Number(answer[1]), uid: payload.uid, name: payload.event_name, statusText, receivedAt, stale: answer[2] === 1, payload };
        return { event, duplicate: false };
      }
      return { event: toStored(answer[1]), duplicate: answer[0] === 1 };
    });
  }

  async eventsAfter(afterSeq: number, limit: number, filter: EventFilter = {}): Promise<StoredEvent[]> {
    if (limit <= 0) return [];
    const after = Math.max(0, Math.floor(afterSeq));
    const uids = filter.uids;
    if (uids && uids.length > 0) {
      const keys = [...new Set(uids)].map((uid) => this.#delivery(uid).events);
      const entries = await this.client.dgEventsOf(String(keys.length + 1), this.#log, ...keys, String(after), String(limit));
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
    const [rank, terminal, seq] = await this.client.hmget(this.#delivery(uid).state, 'rank', 'terminal', 'seq');
    return rank === null ? undefined : { rank: Number(rank), terminal: terminal === '1', seq: Number(seq) };
  }

  async lastSeq(): Promise<number> {
    const [last] = (await this.client.xrevrange(this.#log, '+', '-', 'COUNT', 1)) as StreamEntry[];
    return last ? toStored(last).seq : 0;
  }

  async claimIdempotency(ownerHash: string, idempotencyKey: string, fingerprint: string): Promise<IdempotencyClaim> {
    const token = randomBytes(9).toString('base64url');
    const [state, uid, trackingUrl] = await this.client.dgClaim(
      this.#idem(ownerHash, idempotencyKey),
      fingerprint,
      String(Date.now()),
      String(PENDING_EXPIRY_MS),
      token,
    );
    if (state === 'done') return { state, result: { uid: uid!, trackingUrl: trackingUrl ?? null } };
    return { state: state as 'claimed' | 'pending' | 'conflict' };
  }

  async completeIdempotency(ownerHash: string, idempotencyKey: string, result: BookingResult): Promise<void> {
    await this.client.dgComplete(
      this.#idem(ownerHash, idempotencyKey),
      result.uid,
      flag(result.trackingUrl !== null),
      result.trackingUrl ?? '',
      String(Date.now()),
    );
  }

  async releaseIdempotency(ownerHash: string, idempotencyKey: string): Promise<void> {
    await this.client.dgRelease(this.#idem(ownerHash, idempotencyKey));
  }

  async recordOwner(uid: string, ownerHash: string): Promise<void> {
    await this.client.set(`${this.prefix}owner:${uid}`, ownerHash, 'NX');
  }

  async ownerOf(uid: string): Promise<string | undefined> {
    return (await this.client.get(`${this.prefix}owner:${uid}`)) ?? undefined;
  }

  async ping(): Promise<void> {
    await this.client.ping();
  }

  async close(): Promise<void> {
    if (!this.#ownsClient || this.client.status === 'end') return;
    // QUIT lets answers in flight arrive; on a connection that is down there are none to wait for.
    if (this.client.status === 'ready') await this.client.quit().catch(() => this.client.disconnect());
    else this.client.disconnect();
  }
}

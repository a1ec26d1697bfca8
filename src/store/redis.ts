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
import { Redis, type Result } from 'ioredis';
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
  type IdempotencyClaim,
  type MerchantLink,
  type MerchantMerge,
  OWNER_CLAIMS_KEPT,
  type OwnerClaims,
  type OwnerEntry,
  type OwnerGroup,
  type OwnerProof,
  type OwnerRecord,
  type ReadRecord,
  REDIS_STORE,
  type Store,
  type StoredEvent,
  merchantScoped,
  type UnfinishedDelivery,
  type UnfinishedPage,
} from './store.js';
import { fingerprint } from '../domain/canonical-json.js';
import { bookingMarker } from '../domain/booking-marker.js';

/** A claim as the CLAIM and UNKNOWN scripts answer it. */
function claimOf([state, first, second]: [string, string?, string?]): IdempotencyClaim {
  if (state === 'done') return { state, result: { uid: first!, trackingUrl: second ?? null } };
  if (state === 'unknown') return { state, since: new Date(Number(first)) };
  return { state: state as 'claimed' | 'pending' | 'conflict' };
}

/** A stream entry as Redis returns it: [id, [field, value, field, value, …]]. */
type StreamEntry = [id: string, fields: string[]];

declare module 'ioredis' {
  interface RedisCommander<Context> {
    dgAppend(
      ...args: string[]
    ): Result<Array<[0, string, number, string] | [1 | 2, StreamEntry] | [-1, string]>, Context>;
    dgProve(owner: string, ttlMs: string, stepMs: string, prefix: string): Result<number, Context>;
    dgMergeRead(
      delivery: string,
      events: string,
      basis: string,
      ttlMs: string,
      ...fields: string[]
    ): Result<number, Context>;
    dgLatest(delivery: string, log: string, kind: string): Result<StreamEntry | null, Context>;
    dgEventsOf(...args: string[]): Result<StreamEntry[], Context>;
    dgClaim(
      key: string,
      markerKey: string,
      history: string,
      fingerprint: string,
      now: string,
      expiryMs: string,
      token: string,
      ttlMs: string,
      owner: string,
    ): Result<[string, string?, string?], Context>;
    dgUnknown(key: string, markerKey: string, now: string, ttlMs: string): Result<[string, string?, string?], Context>;
    dgResolve(
      key: string,
      uid: string,
      hasTrackingUrl: string,
      trackingUrl: string,
      now: string,
      ttlMs: string,
    ): Result<string | null, Context>;
    dgComplete(
      key: string,
      uid: string,
      hasTrackingUrl: string,
      trackingUrl: string,
      now: string,
      ttlMs: string,
    ): Result<number, Context>;
    dgRelease(key: string, history: string): Result<number, Context>;
    dgLogHead(log: string, count: string): Result<string[], Context>;
    dgForget(delivery: string, events: string, dedup: string, upTo: string): Result<number, Context>;
    dgUnlease(key: string, token: string): Result<number, Context>;
    dgLease(key: string, token: string, forMs: string): Result<number, Context>;
    dgOwn(
      ownerKey: string,
      unfinished: string,
      history: string,
      claims: string,
      claimsVersion: string,
      value: string,
      merchantScoped: string,
      replace: string,
      ttlMs: string,
      uid: string,
      claimsKept: string,
    ): Result<number, Context>;
    dgOwnerClaims(claims: string, claimsVersion: string, after: string): Result<[number, number, ...string[]], Context>;
    dgLink(key: string, previous: string, prefix: string, maxDepth: string): Result<[string, string?], Context>;
    dgUnlink(link: string, id: string, prefix: string): Result<number, Context>;
    dgMergeLink(from: string, into: string, prefix: string, maxDepth: string): Result<string[], Context>;
    dgMoveClaim(
      claim: string,
      moved: string,
      marker: string,
      mergedHistory: string,
      history: string,
      merchant: string,
    ): Result<number, Context>;
    dgMoveRecord(
      ownerKey: string,
      mergedUnfinished: string,
      unfinished: string,
      history: string,
      merged: string,
      merchant: string,
      uid: string,
    ): Result<number, Context>;
    dgHistory(history: string, field: string, by: string, ttlMs: string): Result<number, Context>;
    dgUnfinished(
      unfinished: string,
      ownerKey: string,
      delivery: string,
      uid: string,
      owner: string,
      since: string,
    ): Result<string | null, Context>;
  }
}

/**
 * Appends a whole group commit in one script call (one round trip, one AOF fsync
 * for the batch), in order, so ranks are compared against what the same batch
 * already wrote. Each event is judged exactly as judge() in src/domain/milestones.ts
 * does, line for line, from the facts factsOf() gave the caller: the event's
 * rank, whether it moves the state, when it is final, whether it proves a pickup,
 * whether it is a dropoff milestone, and (a poll event) the read's basis and
 * whether it confirms; the two branch ranks come first. Then it is appended, the
 * state advanced, and the delivery's view merged as mergeView() and carriedOver()
 * in src/domain/delivery-view.ts do (fields as JSON text, compared as strings).
 * Each event runs under pcall, so one that fails fails alone ({-1, message}). A
 * hit in the dedup hash with this call's own token is a resend of this very
 * append (ioredis resends unanswered commands after a reconnect): not a duplicate.
 */
/** Fixed arguments per event in the APPEND script (keep in step with its ARGV list); its view fields follow. */
const APPEND_FIELDS = 21;

const APPEND = `
-- KEYS: 1 seq, 2 log, then per event: delivery hash, delivery events, delivery dedup
-- ARGV: 1 delivered rank, 2 not-delivered rank, then per event 21 fixed arguments:
--       1 dedup field, 2 token, 3 rank ('' when unknown), 4 moves the state,
--       5 final ('always', 'never' or 'when_confirmed'), 6 proves a pickup, 7 a dropoff milestone,
--       8 the read's basis ('' for a received event), 9 the read confirms,
--       10 counts for latestEvent 'delivery', 11 carries a position,
--       12 uid, 13 name, 14 has status text, 15 status text, 16 received at, 17 payload JSON,
--       18 the courier it names (JSON {id, name}, '' when none),
--       19 its name as JSON, 20 its label as JSON ('' when none), 21 n;
--       then n view fields as key, JSON value.
-- The stale field of an entry is its mark: 0 accepted; bits 1 stale, 2 courier only, 4 contradicts.
-- The view lives in the delivery hash as fields 'v:<key>'.
local delivered = tonumber(ARGV[1])
local ended = tonumber(ARGV[2])
local function same(a, b)
  if a.id ~= nil and b.id ~= nil then return a.id == b.id end
  return a.name == b.name
end
local function other_courier(known, courier)
  return known ~= nil and not same(known, courier)
end
local function append(state, events, dedup, a)
  local function arg(n) return ARGV[a + n] end
  local count = tonumber(arg(21))
  local seen = redis.call('HGET', dedup, arg(1))
  if seen then
    local seq, token = string.match(seen, '^(%d+) (.*)$')
    local entry = redis.call('XRANGE', KEYS[2], seq .. '-0', seq .. '-0')[1]
    if token == arg(2) then return {2, entry} end
    return {1, entry}
  end
  local now = redis.call('HMGET', state, 'rank', 'terminal', 'courier', 'formers', 'pickedUp', 'seq')
  local current = tonumber(now[1])
  local final = current ~= nil and now[2] == '1'
  local picked = now[5] == '1'
  local courier, known, formers = nil, nil, {}
  if arg(18) ~= '' then courier = cjson.decode(arg(18)) end
  if now[3] then known = cjson.decode(now[3]) end
  if now[4] then formers = cjson.decode(now[4]) end
  local stale, moved, courierOnly, contradicts = 0, 0, 0, 0
  -- A read that only confirms a cancel or failure as final: it moves nothing else (no courier), as judgeRead() keeps it.
  local settled = false
  local rank, terminal = nil, '0'
  local moves = arg(4) == '1'
  if arg(3) == '' then
    if final then stale = 1 end
  else
    rank = tonumber(arg(3))
    -- Evidence of pickup counts whatever else the event does.
    if current and arg(6) == '1' then picked = true end
    if current and moves and arg(8) ~= '' and (tonumber(now[6]) or 0) <= tonumber(arg(8)) then
      -- A read newer than the state decides.
      if rank == current then
        if arg(9) == '1' and arg(5) == 'when_confirmed' and not final and not picked then
          moved = 1
          terminal = '1'
          settled = true
        else
          stale = 1
        end
      elseif rank > current or (current >= ended and rank == delivered) then
        moved = 1
      else
        stale = 1
      end
    else
      if current and moves and ((current >= ended and arg(7) == '1') or (current == delivered and rank >= ended)) then contradicts = 1 end
      local former = false
      if courier then
        for _, c in pairs(formers) do
          if same(c, courier) then former = true end
        end
      end
      local other = courier ~= nil and known ~= nil and not same(known, courier)
      if final or former then
        stale = 1
      elseif other and not moves then
        stale = 1
      elseif current and (rank < current or (moves and rank == current)) then
        if other then courierOnly = 1 else stale = 1 end
      elseif moves then
        moved = 1
      end
    end
    if moved == 1 and terminal == '0' and arg(5) == 'always' then terminal = '1' end
  end
  local seq = string.format('%d', redis.call('INCR', KEYS[1]))
  local mark = stale + 2 * courierOnly + 4 * contradicts
  if moved == 1 then
    local newRank = arg(3)
    if terminal == '1' and rank == current then newRank = now[1] end
    redis.call('HSET', state, 'rank', newRank, 'terminal', terminal, 'seq', seq)
    if arg(6) == '1' then picked = true end
  end
  local kept = current ~= nil or moved == 1
  if kept and picked then redis.call('HSET', state, 'pickedUp', '1') end
  if stale == 0 then
    -- An accepted delivery.* event names the courier from now on; one it replaces is remembered.
    if (moved == 1 or courierOnly == 1) and courier and not settled then
      if other_courier(known, courier) then
        local list = {}
        for _, c in pairs(formers) do list[#list + 1] = c end
        list[#list + 1] = known
        redis.call('HSET', state, 'formers', cjson.encode(list))
      end
      redis.call('HSET', state, 'courier', arg(18))
    end
    if arg(10) == '1' then redis.call('HSET', state, 'delivery', seq) end
    if arg(11) == '1' then redis.call('HSET', state, 'location', seq) end
  end
  -- The view, once the delivery has a state: a stale event only fills what is missing.
  local carried = ''
  if kept then
    local own = {}
    local writes = {}
    for i = 1, count do
      local key, value = ARGV[a + 20 + 2 * i], ARGV[a + 21 + 2 * i]
      own[key] = value
      if stale == 0 then
        writes[#writes + 1] = 'v:' .. key
        writes[#writes + 1] = value
      else
        redis.call('HSETNX', state, 'v:' .. key, value)
      end
    end
    own['event_name'] = arg(19)
    if arg(20) ~= '' then own['status'] = arg(20) end
    if moved == 1 then
      writes[#writes + 1] = 'v:event_name'
      writes[#writes + 1] = arg(19)
      if arg(20) ~= '' then
        writes[#writes + 1] = 'v:status'
        writes[#writes + 1] = arg(20)
      else
        redis.call('HDEL', state, 'v:status')
      end
    end
    -- One HSET for all of them (a view has a few dozen fields, far below unpack's limit).
    if #writes > 0 then redis.call('HSET', state, unpack(writes)) end
    local parts = {}
    local all = redis.call('HGETALL', state)
    for i = 1, #all, 2 do
      if string.sub(all[i], 1, 2) == 'v:' then
        local key = string.sub(all[i], 3)
        if own[key] ~= all[i + 1] then parts[#parts + 1] = '"' .. key .. '":' .. all[i + 1] end
      end
    end
    if #parts > 0 then carried = '{' .. table.concat(parts, ',') .. '}' end
  end
  local fields = {'uid', arg(12), 'name', arg(13), 'at', arg(16), 'stale', mark, 'payload', arg(17)}
  if arg(14) == '1' then
    fields[#fields + 1] = 'status'
    fields[#fields + 1] = arg(15)
  end
  if carried ~= '' then
    fields[#fields + 1] = 'carried'
    fields[#fields + 1] = carried
  end
  redis.call('XADD', KEYS[2], seq .. '-0', unpack(fields))
  redis.call('HSET', dedup, arg(1), seq .. ' ' .. arg(2))
  redis.call('ZADD', events, seq, seq)
  -- Kept by a read before any event, it lives by its events from now on (FORGET).
  redis.call('PERSIST', state)
  return {0, seq, mark, carried}
end
local results = {}
local a = 2
for i = 1, (#KEYS - 2) / 3 do
  local k = 3 + (i - 1) * 3
  local ok, result = pcall(append, KEYS[k], KEYS[k + 1], KEYS[k + 2], a)
  if ok then results[i] = result else results[i] = {-1, tostring(result)} end
  a = a + 21 + 2 * tonumber(ARGV[a + 21])
end
return results
`;

/**
 * Merges a read into a delivery's view (Store.recordRead), as mergeRead on SQLite's writer thread does. Before any state
 * the read overwrites, and the hash lives by the retention until an event is stored for it (APPEND persists it).
 */
const MERGE_READ = `
-- KEYS: 1 delivery hash, 2 delivery events; ARGV: 1 the read's basis, 2 time to live (ms; '' for ever), then view
-- fields as key, JSON value
local seq = redis.call('HGET', KEYS[1], 'seq')
local stated = redis.call('HEXISTS', KEYS[1], 'rank') == 1
local overwrite = not stated or (tonumber(seq) or 0) <= tonumber(ARGV[1])
for i = 3, #ARGV, 2 do
  if overwrite then
    redis.call('HSET', KEYS[1], 'v:' .. ARGV[i], ARGV[i + 1])
  else
    redis.call('HSETNX', KEYS[1], 'v:' .. ARGV[i], ARGV[i + 1])
  end
end
if not stated and ARGV[2] ~= '' and redis.call('EXISTS', KEYS[2]) == 0 then redis.call('PEXPIRE', KEYS[1], ARGV[2]) end
return 1
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

/**
 * A merchant's history (Store.linkMerchant), as the scripts that write a record
 * or a claim keep it: a field set (or counted) in merchant-history:<id>, which
 * lives at least as long as what was just written (time to live in ms, '' for ever).
 */
const HISTORY = `
local function keep_for(key, existed, ttl)
  if ttl == '' then
    redis.call('PERSIST', key)
    return
  end
  local left = -2
  if existed then left = redis.call('PTTL', key) end
  if left == -2 or (left >= 0 and left < tonumber(ttl)) then redis.call('PEXPIRE', key, ttl) end
end
local function keep_history(key, field, by, ttl)
  local existed = redis.call('EXISTS', key) == 1
  if by then redis.call('HINCRBY', key, field, by) else redis.call('HSET', key, field, '1') end
  keep_for(key, existed, ttl)
end
local function drop_claim(key)
  if tonumber(redis.call('HGET', key, 'claims') or '0') > 0 then redis.call('HINCRBY', key, 'claims', -1) end
end
`;

/**
 * An owner record proved again (an event of its delivery, or its own merchant's proof): its retention starts anew, and
 * its merchant's unfinished set and history live at least as long.
 */
const PROVE_RECORD = `${HISTORY}
local function prove(record, unfinished, history, ttl)
  redis.call('PEXPIRE', record, ttl)
  keep_for(unfinished, true, ttl)
  keep_history(history, 'records', nil, ttl)
end
`;

/** An event proves its delivery's owner record, if it has one not proved within the last step (proofRefreshMs). */
const PROVE = `${PROVE_RECORD}
-- KEYS: 1 owner:<uid>. ARGV: 1 time to live (ms), 2 step (ms), 3 prefix
local left = redis.call('PTTL', KEYS[1])
if left < 0 or left > tonumber(ARGV[1]) - tonumber(ARGV[2]) then return 0 end
local owner = string.match(redis.call('GET', KEYS[1]), '^(%S+)')
prove(KEYS[1], ARGV[3] .. 'unfinished:' .. owner, ARGV[3] .. 'merchant-history:' .. owner, ARGV[1])
return 1
`;

/** A resend of the same claim (same token) is still this caller's claim. */
const CLAIM = `${HISTORY}
-- KEYS: 1 idem key, 2 its marker key, 3 the owner's history
-- ARGV: 1 fingerprint, 2 now (ms), 3 pending expiry (ms), 4 token, 5 time to live (ms; '' for ever), 6 owner hash
local r = redis.call('HMGET', KEYS[1], 'fingerprint', 'state', 'uid', 'trackingUrl', 'updatedAt', 'token')
if not r[1] then
  redis.call('HSET', KEYS[1], 'fingerprint', ARGV[1], 'state', 'pending', 'updatedAt', ARGV[2], 'token', ARGV[4], 'owner', ARGV[6])
  redis.call('SET', KEYS[2], KEYS[1])
  if ARGV[5] ~= '' then
    redis.call('PEXPIRE', KEYS[1], ARGV[5])
    redis.call('PEXPIRE', KEYS[2], ARGV[5])
  end
  keep_history(KEYS[3], 'claims', 1, ARGV[5])
  return {'claimed'}
end
if r[1] ~= ARGV[1] then return {'conflict'} end
if r[2] == 'done' then return {'done', r[3], r[4]} end
if r[2] == 'unknown' then return {'unknown', r[5]} end
if r[6] == ARGV[4] then return {'claimed'} end
if tonumber(ARGV[2]) - tonumber(r[5]) > tonumber(ARGV[3]) then
  -- Its process died mid-call: the booking may have been sent.
  redis.call('HSET', KEYS[1], 'state', 'unknown', 'updatedAt', ARGV[2])
  if ARGV[5] ~= '' then
    redis.call('PEXPIRE', KEYS[1], ARGV[5])
    redis.call('PEXPIRE', KEYS[2], ARGV[5])
  end
  return {'unknown', ARGV[2]}
end
return {'pending'}
`;
const UNKNOWN = `
-- KEYS: 1 idem key, 2 its marker key. ARGV: 1 now (ms), 2 time to live (ms; '' for ever)
local r = redis.call('HMGET', KEYS[1], 'state', 'uid', 'trackingUrl', 'updatedAt')
if not r[1] then return {'unknown', ARGV[1]} end
if r[1] == 'done' then return {'done', r[2], r[3]} end
if r[1] == 'pending' then
  redis.call('HSET', KEYS[1], 'state', 'unknown', 'updatedAt', ARGV[1])
  if ARGV[2] ~= '' then
    redis.call('PEXPIRE', KEYS[1], ARGV[2])
    redis.call('PEXPIRE', KEYS[2], ARGV[2])
  end
  return {'unknown', ARGV[1]}
end
return {'unknown', r[4]}
`;
const RESOLVE = `
-- ARGV: 1 uid, 2 has tracking URL, 3 tracking URL, 4 now (ms), 5 time to live (ms; '' for ever)
local state = redis.call('HGET', KEYS[1], 'state')
if state ~= 'pending' and state ~= 'unknown' then return false end
redis.call('HSET', KEYS[1], 'state', 'done', 'uid', ARGV[1], 'updatedAt', ARGV[4])
if ARGV[2] == '1' then redis.call('HSET', KEYS[1], 'trackingUrl', ARGV[3]) end
if ARGV[5] ~= '' then redis.call('PEXPIRE', KEYS[1], ARGV[5]) end
return redis.call('HGET', KEYS[1], 'owner')
`;
const COMPLETE = `
-- ARGV: 1 uid, 2 has tracking URL, 3 tracking URL, 4 now (ms), 5 time to live (ms; '' for ever)
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
redis.call('HSET', KEYS[1], 'state', 'done', 'uid', ARGV[1], 'updatedAt', ARGV[4])
if ARGV[5] ~= '' then redis.call('PEXPIRE', KEYS[1], ARGV[5]) end
if ARGV[2] == '1' then
  redis.call('HSET', KEYS[1], 'trackingUrl', ARGV[3])
else
  redis.call('HDEL', KEYS[1], 'trackingUrl')
end
return 1
`;

const RELEASE = `${HISTORY}
-- KEYS: 1 idem key, 2 the owner's history
local state = redis.call('HGET', KEYS[1], 'state')
if state == 'pending' or state == 'unknown' then
  redis.call('DEL', KEYS[1])
  drop_claim(KEYS[2])
  return 1
end
return 0
`;

/** The oldest entries of the log, without their payloads: seq, received at and uid of each, flat. */
const LOG_HEAD = `
local out = {}
for _, entry in ipairs(redis.call('XRANGE', KEYS[1], '-', '+', 'COUNT', ARGV[1])) do
  local at, uid = '', ''
  local fields = entry[2]
  for i = 1, #fields, 2 do
    if fields[i] == 'at' then at = fields[i + 1] elseif fields[i] == 'uid' then uid = fields[i + 1] end
  end
  out[#out + 1] = string.match(entry[1], '^(%d+)')
  out[#out + 1] = at
  out[#out + 1] = uid
end
return out
`;

/**
 * Takes a delivery's events up to a seq out of its keys, before the log itself
 * is trimmed (so a dedup hit never points at a trimmed entry). A delivery with
 * no event left is forgotten entirely, its milestone state with it, as SQLite does.
 */
const FORGET = `
-- KEYS: 1 delivery hash, 2 delivery events, 3 delivery dedup; ARGV: 1 last trimmed seq
local upTo = tonumber(ARGV[1])
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', upTo)
if redis.call('ZCARD', KEYS[2]) == 0 then
  redis.call('DEL', KEYS[1], KEYS[2], KEYS[3])
  return 1
end
local dedup = redis.call('HGETALL', KEYS[3])
for i = 1, #dedup, 2 do
  if tonumber(string.match(dedup[i + 1], '^(%d+)')) <= upTo then redis.call('HDEL', KEYS[3], dedup[i]) end
end
for _, kind in ipairs({'delivery', 'location'}) do
  local seq = tonumber(redis.call('HGET', KEYS[1], kind))
  if seq and seq <= upTo then redis.call('HDEL', KEYS[1], kind) end
end
return 0
`;

/**
 * Takes a read lease for this instance (its token): a lease it holds already
 * is taken again, for `forMs` from now; another instance's is not.
 */
const LEASE = `
-- KEYS: 1 the lease. ARGV: 1 this instance's token, 2 for (ms)
if redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2], 'NX') then return 1 end
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return 1
end
return 0
`;

/** Gives a lease (the trim's, a read's) back, unless it expired and another instance holds it now. */
const UNLEASE = `
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
`;

/**
 * Writes an owner record by the rule of supersedes() (src/store/store.ts): the
 * first stays, but a merchant-scoped proof replaces a record learned from a
 * read (proof `read`, or none: written before proofs were kept), and a replace
 * replaces anything. A record written puts the delivery in its owner's set of
 * deliveries reconciliation may read (a former owner's set drops it when paged).
 * A record kept is proved again when the proof is its own merchant's.
 */
const OWN = `${PROVE_RECORD}
-- KEYS: 1 owner:<uid>, 2 unfinished:<owner>, 3 the owner's history, 4 owner-claims, 5 owner-claims:version
-- ARGV: 1 value, 2 merchant-scoped, 3 replace, 4 time to live (ms; '' for ever), 5 uid, 6 claims kept
local current = redis.call('GET', KEYS[1])
if current and ARGV[3] ~= '1' then
  local proof = string.match(current, '^%S+ %S+ (%S+)')
  if ARGV[2] ~= '1' or (proof and proof ~= 'read') then
    local same = string.match(current, '^(%S+)') == string.match(ARGV[1], '^(%S+)')
    if same and ARGV[4] ~= '' then prove(KEYS[1], KEYS[2], KEYS[3], ARGV[4]) end
    return 0
  end
end
if ARGV[4] ~= '' then redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[4]) else redis.call('SET', KEYS[1], ARGV[1]) end
redis.call('ZADD', KEYS[2], 0, ARGV[5])
if ARGV[4] ~= '' then redis.call('PEXPIRE', KEYS[2], ARGV[4]) end
keep_history(KEYS[3], 'records', nil, ARGV[4])
if ARGV[3] == '1' then
  -- An operator's claim: running instances learn it (ownerClaimsAfter) and forget what they remembered of the uid.
  redis.call('ZADD', KEYS[4], redis.call('INCR', KEYS[5]), ARGV[5])
  redis.call('ZREMRANGEBYRANK', KEYS[4], 0, -tonumber(ARGV[6]) - 1)
end
return 1
`;

/**
 * Store.ownerClaimsAfter: {version, complete, uids...}; complete is 0 when a claim
 * made after the version asked is no longer kept.
 */
const OWNER_CLAIMS = `
-- KEYS: 1 owner-claims, 2 owner-claims:version. ARGV: 1 after ('' for the version alone)
local version = tonumber(redis.call('GET', KEYS[2]) or '0')
if ARGV[1] == '' or version <= tonumber(ARGV[1]) then return {version, 1} end
local after = tonumber(ARGV[1])
local out = {version, 1}
local oldest = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
if #oldest == 0 or tonumber(oldest[2]) > after + 1 then
  out[2] = 0
  return out
end
for _, uid in ipairs(redis.call('ZRANGEBYSCORE', KEYS[1], '(' .. after, '+inf')) do out[#out + 1] = uid end
return out
`;

/**
 * Following merchant links by name, as the link scripts do (keys not given in
 * KEYS, as a chain cannot be known beforehand: one more reason this store does
 * not run on Redis Cluster). ARGV 3 is the store's prefix, 4 the most links followed.
 */
const MERCHANTS = `
local prefix, depth = ARGV[3], tonumber(ARGV[4])
local function link_of(id) return prefix .. 'merchant-link:' .. id end
local function keys_of(id) return prefix .. 'merchant-keys:' .. id end
local function root(id)
  for _ = 1, depth do
    local next = redis.call('GET', link_of(id))
    if not next then break end
    id = next
  end
  return id
end
`;

/** Store.linkMerchant in one step: the rule of sqlite-writer.ts's link(). */
const LINK = `${MERCHANTS}
-- ARGV: 1 key, 2 previous, 3 prefix, 4 most links followed
local function history(id)
  if redis.call('EXISTS', link_of(id)) == 1 or redis.call('SCARD', keys_of(id)) > 0 then return true end
  local h = redis.call('HMGET', prefix .. 'merchant-history:' .. id, 'records', 'claims')
  return h[1] == '1' or (tonumber(h[2]) or 0) > 0
end
local a, b = root(ARGV[1]), root(ARGV[2])
if a == b then return {'same', a} end
local from, to = a, b
if history(a) then
  if history(b) then return {'refused'} end
  from, to = b, a
end
redis.call('SET', link_of(from), to)
redis.call('SADD', keys_of(to), from)
return {'linked', to}
`;

/** Store.unlinkMerchant: the link, and the id in its merchant's set. */
const UNLINK = `
-- KEYS: 1 the link. ARGV: 1 id, 2 prefix
local to = redis.call('GET', KEYS[1])
if not to then return 0 end
redis.call('DEL', KEYS[1])
redis.call('SREM', ARGV[2] .. 'merchant-keys:' .. to, ARGV[1])
return 1
`;

/**
 * The first step of Store.mergeMerchant: the root of `from` (and every id linked
 * to it) linked to the root of `into`. Answers that root, the merged root ('' when
 * they were one already), and every id that leads to the root now.
 */
const MERGE_LINK = `${MERCHANTS}
-- ARGV: 1 from, 2 into, 3 prefix, 4 most links followed
local a, b = root(ARGV[1]), root(ARGV[2])
if a ~= b then
  for _, id in ipairs(redis.call('SMEMBERS', keys_of(a))) do
    redis.call('SET', link_of(id), b)
    redis.call('SADD', keys_of(b), id)
  end
  redis.call('DEL', keys_of(a))
  redis.call('SET', link_of(a), b)
  redis.call('SADD', keys_of(b), a)
end
local out, seen, queue = {b, ''}, {}, {b}
if a ~= b then out[2] = a end
while #queue > 0 and #out < 10000 do
  local id = table.remove(queue)
  for _, linked in ipairs(redis.call('SMEMBERS', keys_of(id))) do
    if not seen[linked] and linked ~= b then
      seen[linked] = true
      out[#out + 1] = linked
      queue[#queue + 1] = linked
    end
  end
end
return out
`;

/**
 * Moves one idempotency claim of a merged id to its merchant (its booking marker follows); one the merchant has already
 * is dropped.
 */
const MOVE_CLAIM = `${HISTORY}
-- KEYS: 1 the claim, 2 the merchant's claim of the same key, 3 its booking marker, 4 the merged id's history, 5 the merchant's
-- ARGV: 1 the merchant
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
drop_claim(KEYS[4])
if redis.call('EXISTS', KEYS[2]) == 1 then
  redis.call('DEL', KEYS[1])
  return 2
end
redis.call('RENAME', KEYS[1], KEYS[2])
redis.call('HSET', KEYS[2], 'owner', ARGV[1])
if redis.call('EXISTS', KEYS[3]) == 1 then redis.call('SET', KEYS[3], KEYS[2], 'KEEPTTL') end
local left = redis.call('PTTL', KEYS[2])
keep_history(KEYS[5], 'claims', 1, left >= 0 and tostring(left) or '')
return 1
`;

/**
 * Moves one owner record of a merged id to its merchant, and the delivery to the merchant's unfinished set if it was in
 * the merged one's.
 */
const MOVE_RECORD = `${HISTORY}
-- KEYS: 1 owner:<uid>, 2 unfinished:<merged>, 3 unfinished:<merchant>, 4 the merchant's history. ARGV: 1 merged, 2 merchant, 3 uid
local value = redis.call('GET', KEYS[1])
if not value then return 0 end
local owner, rest = string.match(value, '^(%S+)(.*)$')
if owner ~= ARGV[1] then return 0 end
redis.call('SET', KEYS[1], ARGV[2] .. rest, 'KEEPTTL')
local left = redis.call('PTTL', KEYS[1])
local ttl = left >= 0 and tostring(left) or ''
if redis.call('ZREM', KEYS[2], ARGV[3]) == 1 then
  local existed = redis.call('EXISTS', KEYS[3]) == 1
  redis.call('ZADD', KEYS[3], 0, ARGV[3])
  keep_for(KEYS[3], existed, ttl)
end
keep_history(KEYS[4], 'records', nil, ttl)
return 1
`;

/** A history field for data written before histories were kept (RedisStore's #historyKept). */
const KEEP_HISTORY = `${HISTORY}
-- KEYS: 1 the history. ARGV: 1 field, 2 count by ('' for a flag), 3 time to live (ms; '' for ever)
keep_history(KEYS[1], ARGV[1], ARGV[2] ~= '' and ARGV[2] or nil, ARGV[3])
return 1
`;

/** Links followed at most, as in the SQLite store (sqlite-writer.ts). */
const MAX_LINK_DEPTH = 16;

/** The owner value's proof, when it names one this version knows. */
const OWNER_PROOFS: ReadonlySet<string> = new Set<OwnerProof>(['booked', 'reference', 'canceled', 'claimed', 'read']);

/**
 * One member of an owner's set, as reconciliation pages through it: its group
 * ('' when the record has none) while it is unfinished; otherwise (its record
 * expired, older than since, or its state final) it leaves the set, and nil.
 */
const UNFINISHED = `
-- KEYS: 1 unfinished:<owner>, 2 owner:<uid>, 3 delivery:<uid>; ARGV: 1 uid, 2 owner, 3 since (ms)
local record = redis.call('GET', KEYS[2])
if record then
  local owner, group, _, at = string.match(record, '^(%S+) ?(%S*) ?(%S*) ?(%S*)$')
  local recent = at == '' or tonumber(at) == nil or tonumber(at) >= tonumber(ARGV[3])
  if owner == ARGV[2] and recent and redis.call('HGET', KEYS[3], 'terminal') ~= '1' then
    if group == '-' then group = '' end
    return group
  end
end
redis.call('ZREM', KEYS[1], ARGV[1])
return false
`;

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

function defineAppend(client: Redis): void {
  client.defineCommand('dgAppend', { lua: APPEND });
  client.defineCommand('dgProve', { numberOfKeys: 1, lua: PROVE });
}

export class RedisStore implements Store {
  readonly [REDIS_STORE] = true;
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
    defineAppend(client);
    client.defineCommand('dgLatest', { numberOfKeys: 2, lua: LATEST });
    client.defineCommand('dgMergeRead', { numberOfKeys: 2, lua: MERGE_READ });
    client.defineCommand('dgEventsOf', { lua: EVENTS_OF });
    client.defineCommand('dgClaim', { numberOfKeys: 3, lua: CLAIM });
    client.defineCommand('dgUnknown', { numberOfKeys: 2, lua: UNKNOWN });
    client.defineCommand('dgResolve', { numberOfKeys: 1, lua: RESOLVE });
    client.defineCommand('dgComplete', { numberOfKeys: 1, lua: COMPLETE });
    client.defineCommand('dgRelease', { numberOfKeys: 2, lua: RELEASE });
    client.defineCommand('dgLogHead', { numberOfKeys: 1, lua: LOG_HEAD });
    client.defineCommand('dgForget', { numberOfKeys: 3, lua: FORGET });
    client.defineCommand('dgUnlease', { numberOfKeys: 1, lua: UNLEASE });
    client.defineCommand('dgLease', { numberOfKeys: 1, lua: LEASE });
    client.defineCommand('dgOwn', { numberOfKeys: 5, lua: OWN });
    client.defineCommand('dgOwnerClaims', { numberOfKeys: 2, lua: OWNER_CLAIMS });
    client.defineCommand('dgLink', { numberOfKeys: 0, lua: LINK });
    client.defineCommand('dgUnlink', { numberOfKeys: 1, lua: UNLINK });
    client.defineCommand('dgMergeLink', { numberOfKeys: 0, lua: MERGE_LINK });
    client.defineCommand('dgMoveClaim', { numberOfKeys: 5, lua: MOVE_CLAIM });
    client.defineCommand('dgMoveRecord', { numberOfKeys: 4, lua: MOVE_RECORD });
    client.defineCommand('dgHistory', { numberOfKeys: 1, lua: KEEP_HISTORY });
    client.defineCommand('dgUnfinished', { numberOfKeys: 3, lua: UNFINISHED });
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

  async appendEvents(
    events: ReadonlyArray<{ payload: WireWebhookEvent; receivedAt: string }>,
  ): Promise<AppendResult[]> {
    if (events.length === 0) return [];
    // The whole batch in one script call, in order: one round trip, and ranks compared
    // against what the same batch already wrote. Resolves once Redis answered.
    const token = randomBytes(9).toString('base64url');
    // An event whose arguments cannot even be built fails alone; the others still go.
    const outcomes = new Array<AppendResult | Error>(events.length);
    const sent: number[] = [];
    const keys: string[] = [];
    const args: string[] = [];
    for (const [index, { payload, receivedAt }] of events.entries()) {
      let eventKeys: string[];
      let eventArgs: string[];
      try {
        const name = payload.event_name;
        const delivery = this.#delivery(payload.uid);
        const facts = factsOf(payload);
        const statusText = typeof payload.status === 'string' ? payload.status : null;
        const mover = moverFields(name, statusText);
        const view = viewFields(payload as unknown as JsonObject);
        eventKeys = [delivery.state, delivery.events, delivery.dedup];
        eventArgs = [
          `${fingerprint(payload)} ${name}`,
          `${token}.${index}`,
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
          ...view.flat(),
        ];
        // Out of step with the script, these arguments would be read shifted, and so would every later event's.
        if (eventArgs.length !== APPEND_FIELDS + 2 * view.length)
          throw new Error(
            `APPEND takes ${APPEND_FIELDS} fixed arguments per event, ${eventArgs.length - 2 * view.length} were built`,
          );
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
    return outcomes as AppendResult[];
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
      defineAppend(this.#writer);
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

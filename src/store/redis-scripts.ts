// The Redis store's Lua scripts (src/store/redis.ts runs them): what must be atomic there is one script, as one
// transaction is in SQLite. The APPEND script is the store's copy of the one judging rule (src/domain/milestones.ts),
// pinned to it by the store contract test.
import type { Redis, Result } from 'ioredis';

/** A stream entry as Redis returns it: [id, [field, value, field, value, …]]. */
export type StreamEntry = [id: string, fields: string[]];

declare module 'ioredis' {
  interface RedisCommander<Context> {
    dgAppend(
      ...args: string[]
    ): Result<Array<[0, string, number, string] | [1 | 2, StreamEntry] | [3] | [-1, string]>, Context>;
    dgProve(owner: string, ttlMs: string, stepMs: string, prefix: string): Result<number, Context>;
    dgMergeRead(
      delivery: string,
      events: string,
      basis: string,
      ttlMs: string,
      ...fields: string[]
    ): Result<number, Context>;
    dgLatest(delivery: string, log: string, kind: string): Result<StreamEntry | null, Context>;
    dgConfirmed(...args: string[]): Result<Array<[string[], string, string]>, Context>;
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
export const APPEND_FIELDS = 22;

const APPEND = `
-- KEYS: 1 seq, 2 log, then per event: delivery hash, delivery events, delivery dedup
-- ARGV: 1 delivered rank, 2 not-delivered rank, then per event 21 fixed arguments:
--       1 dedup field, 2 token, 3 rank ('' when unknown), 4 moves the state,
--       5 final ('always', 'never' or 'when_confirmed'), 6 proves a pickup, 7 a dropoff milestone,
--       8 the read's basis ('' for a received event), 9 the read confirms,
--       10 counts for latestEvent 'delivery', 11 carries a position,
--       12 uid, 13 name, 14 has status text, 15 status text, 16 received at, 17 payload JSON,
--       18 the courier it names (JSON {id, name}, '' when none),
--       19 its name as JSON, 20 its label as JSON ('' when none), 21 n,
--       22 the condition it is stored on ('' none, 'accepted', 'decisive': AppendCondition in store.ts);
--       then n view fields as key, JSON value.
-- The stale field of an entry is its mark, the verdict: bits 1 stale, 2 courier only, 4 contradicts, 8 moved the
-- milestone (or made it final), 16 the delivery is final after it. An event whose condition does not hold: {3}.
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
  local condition = arg(22)
  if condition == 'accepted' and stale == 1 then return {3} end
  if condition == 'decisive' and not (moved == 1 and (final or settled)) then return {3} end
  local finalAfter = final
  if moved == 1 then finalAfter = terminal == '1' end
  local seq = string.format('%d', redis.call('INCR', KEYS[1]))
  local mark = stale + 2 * courierOnly + 4 * contradicts + 8 * moved
  if finalAfter then mark = mark + 16 end
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
      local key, value = ARGV[a + 21 + 2 * i], ARGV[a + 22 + 2 * i]
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
  a = a + 22 + 2 * tonumber(ARGV[a + 21])
end
return results
`;

/**
 * Merges a read into a delivery's view (Store.recordRead), as mergeRead on SQLite's writer thread does. Before any state
 * the read overwrites, and the hash lives by the retention until an event is stored for it (APPEND persists it).
 */
const MERGE_READ = `
-- KEYS: 1 delivery hash, 2 delivery events; ARGV: 1 the read's basis, 2 time to live (ms; '' for ever), 3 when the
-- read was made (ms), 4 its status's rank ('' for none), then view fields as key, JSON value
local seq = redis.call('HGET', KEYS[1], 'seq')
local stated = redis.call('HEXISTS', KEYS[1], 'rank') == 1
local overwrite = not stated or (tonumber(seq) or 0) <= tonumber(ARGV[1])
-- What it confirms (readConfirmation in store.ts): as of the read when the state is at its milestone, else the view is
-- behind as of then (a negative time); a newer read replaces an older one's, never the reverse.
local at = math.abs(tonumber(redis.call('HGET', KEYS[1], 'r:at') or '0'))
if tonumber(ARGV[3]) >= at then
  local agrees = stated and ARGV[4] ~= ''
    and math.floor(tonumber(redis.call('HGET', KEYS[1], 'rank'))) == math.floor(tonumber(ARGV[4]))
  local settled = agrees and redis.call('HGET', KEYS[1], 'terminal') == '1'
  redis.call('HSET', KEYS[1], 'r:at', agrees and ARGV[3] or ('-' .. ARGV[3]), 'r:settled', settled and '1' or '0')
end
for i = 5, #ARGV, 2 do
  if overwrite then
    redis.call('HSET', KEYS[1], 'v:' .. ARGV[i], ARGV[i + 1])
  else
    redis.call('HSETNX', KEYS[1], 'v:' .. ARGV[i], ARGV[i + 1])
  end
end
if not stated and ARGV[2] ~= '' and redis.call('EXISTS', KEYS[2]) == 0 then redis.call('PEXPIRE', KEYS[1], ARGV[2]) end
return 1
`;

/**
 * Views with their confirmations (Store.confirmedViews): each delivery hash whole, and when its latest accepted
 * delivery event and its latest accepted position were received (the log entries' 'at').
 */
const CONFIRMED = `
-- KEYS: 1 log, then delivery hashes
local out = {}
for i = 2, #KEYS do
  local stamps = {}
  for _, kind in ipairs({'delivery', 'location'}) do
    local seq = redis.call('HGET', KEYS[i], kind)
    local entry = seq and redis.call('XRANGE', KEYS[1], seq .. '-0', seq .. '-0')[1]
    local stamp = ''
    if entry then
      for j = 1, #entry[2], 2 do if entry[2][j] == 'at' then stamp = entry[2][j + 1] end end
    end
    stamps[#stamps + 1] = stamp
  end
  out[#out + 1] = {redis.call('HGETALL', KEYS[i]), stamps[1], stamps[2]}
end
return out
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

/** The append script and the owner-record proof it is sent with (also on the connection that WAITs for replicas). */
export function defineAppendScripts(client: Redis): void {
  client.defineCommand('dgAppend', { lua: APPEND });
  client.defineCommand('dgProve', { numberOfKeys: 1, lua: PROVE });
}

/** Every script, as the commands RedisStore calls (their types are declared above). */
export function defineScripts(client: Redis): void {
  defineAppendScripts(client);
  client.defineCommand('dgLatest', { numberOfKeys: 2, lua: LATEST });
  client.defineCommand('dgConfirmed', { lua: CONFIRMED });
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

-- admit.lua: flash-sale admissions of one voucher, atomic inside Redis -- the one
-- admission script: a single admission is a batch of one (src/sale/admission.c sends the
-- admissions that queue up behind a call in flight together, up to 64).
--
-- KEYS[1] seckill:voucher:{id}  hash stock, begin, end (epoch seconds), ep (Redis generation),
--                               buckets (K, of a voucher in stock buckets), paused (present
--                               while the admin has the sale paused)
-- KEYS[2] seckill:order:{id}    hash userId -> orderId (one order per user; order lookups
--                               read it for orders not yet in SQL: src/api/orders.h)
-- KEYS[3] seckill:stream:{id}   the voucher's order stream (consumer group g1)
-- ARGV[1] voucherId
-- ARGV[2] transport: 'stream' = XADD to KEYS[3] ONE entry per call carrying every order it
--         admitted, os = "ts ep orderId userId [orderId userId ...]" (the format and its
--         readers: src/sale/sentry.h); 'queue' = nothing (queue mode: the server
--         keeps the order in its own memory; see src/sale/ordq.h for what that costs)
-- [ARGV[3]] K, only in a call that asks for the check (so #ARGV is odd): the stock buckets
--         the caller routed these buyers by, when it does not know the voucher's K yet
--         (src/sale/buckets.h; the hash's `buckets` field, absent = 1)
-- then userId, orderId of the first buyer; then the next buyer's, and so on.
--
-- Returns one code per buyer, in ARGV order: 0 admitted, 1 sold out, 2 already bought, 3
-- not started, 4 ended, 5 no such flash-sale voucher, 6 paused (the hash's `paused` field,
-- set by the admin's pause: src/api/api_sale.c) -- or, when the call asked for the
-- check and the voucher's K is not the caller's, that K alone (an integer, not a list) and
-- nothing decided: the caller sent buyers who may live in other buckets, and routes them
-- again by it. A caller that knows the K asks no check, and its call reads no `buckets`
-- field. The checks run in the course's order (stock before duplicate), with the sale
-- window checked first against Redis's own clock, so every instance judges the window by
-- the same time. A batch decides exactly as the same buyers one call each, back to back:
-- one TIME, one read of the voucher, one read and one write of the buyer hash, one stream
-- entry and one stock write per call instead of one each (each redis.call costs the script
-- ~0.5-1 us beside the command's own work, and each write is one more record in the AOF;
-- docs/performance.md, "Where the time goes"). Stock is taken, the buyer recorded and the
-- order queued in one step: there is no moment where stock is gone and the order is not in
-- the stream. Each stream entry carries ep, the voucher's Redis generation: after a
-- rebuild from SQL (src/rebuild/rebuild.c) the writer refuses entries of the replaced
-- state. ts is TIME's second, the clock the window was judged by.
local mode = ARGV[2]
local o = #ARGV % 2   -- 1: ARGV[3] is K (the call asks for the check)
if (mode ~= 'stream' and mode ~= 'queue') or #ARGV < 4 + o or #KEYS ~= 3 then
  -- before any write: a caller of another argument layout must not take stock
  return redis.error_reply('ERR admit.lua: bad arguments (KEYS voucher buyers stream, ' ..
                           'ARGV voucherId transport [K] userId orderId ...)')
end
local n = (#ARGV - 2 - o) / 2
local out = {}
local v
if o == 1 then
  v = redis.call('HMGET', KEYS[1], 'stock', 'begin', 'end', 'ep', 'buckets', 'paused')
else
  v = redis.call('HMGET', KEYS[1], 'stock', 'begin', 'end', 'ep', 'paused')
end
local stock = tonumber(v[1])
local code
local now = 0
if not stock then
  code = 5
else
  if o == 1 and (v[5] or '1') ~= ARGV[3] then return tonumber(v[5]) or 1 end
  now = tonumber(redis.call('TIME')[1])
  if now < tonumber(v[2]) then code = 3 elseif now >= tonumber(v[3]) then code = 4
  elseif v[5 + o] then code = 6 end
end
if code then
  for i = 1, n do out[i] = code end
  return out
end
local ep = v[4] or '0'
if stock <= 0 then
  for i = 1, n do out[i] = 1 end
  return out
end
-- Who bought already: one HMGET for the call (false = not yet), and the admitted ones
-- recorded with one HSET at the end; seen catches a buyer twice in the same call, as a
-- second HSETNX would have. A call of one buyer (an unloaded server, queue mode) does
-- both with one HSETNX instead.
local uids = {}
for i = 1, n do uids[i] = ARGV[2 * i + 1 + o] end
local had, recorded
if n == 1 then
  had = {redis.call('HSETNX', KEYS[2], uids[1], ARGV[4 + o]) == 0}
  recorded = true
else
  had = redis.call('HMGET', KEYS[2], unpack(uids))
end
local seen, set = {}, {}
-- the stream entry: the call's shared part first (a number becomes a string by a printf
-- inside Lua: once per call), then orderId userId per admitted buyer
local entry = {tostring(now), ep}
local taken = 0
for i = 1, n do
  local uid, oid = uids[i], ARGV[2 * i + 2 + o]
  if stock - taken <= 0 then
    out[i] = 1
  elseif had[i] or seen[uid] then
    out[i] = 2
  else
    taken = taken + 1
    seen[uid] = true
    set[2 * taken - 1], set[2 * taken] = uid, oid
    if mode == 'stream' then
      entry[2 * taken + 1], entry[2 * taken + 2] = oid, uid
    end
    out[i] = 0
  end
end
if taken > 0 then
  if not recorded then redis.call('HSET', KEYS[2], unpack(set)) end
  if mode == 'stream' then redis.call('XADD', KEYS[3], '*', 'os', table.concat(entry, ' ')) end
  redis.call('HINCRBY', KEYS[1], 'stock', -taken)
end
return out

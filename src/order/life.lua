-- life.lua: an admitted order's lifecycle decisions, atomic inside Redis, on the slot of
-- the buyer's stock bucket (the keys the order was admitted under; docs/lifecycle.md).
--
-- KEYS[1] seckill:voucher:{tag}  hash stock, ep, returned (units cancelled orders gave back)
-- KEYS[2] seckill:order:{tag}    hash userId -> orderId (admit.lua's buyers)
-- KEYS[3] seckill:ostate:{tag}   hash orderId -> "<state> <ts> <userId>" (the state
--                                machine's memory: an order without a field is unpaid,
--                                status 1), and "<orderId>/<paymentId>" -> a payment's answer
-- KEYS[4] seckill:due:{tag}      zset "<orderId>:<userId>" by payment deadline (written by
--                                the order writer, swept by it: src/writer/writer_life.c)
-- KEYS[5] seckill:stream:{tag}   the bucket's order stream: the event goes behind the
--                                order's own entry, so the writer applies it after the insert
-- ARGV[1] op: 'cancel' (the buyer), 'expire' (the payment deadline passed) or 'pay' (a
--         payment notice, signature and amount checked by the caller)
-- ARGV[2] orderId   ARGV[3] userId (the order's, as the caller found it)
-- ARGV[4] pay only: the provider's paymentId
--
-- State values: c cancelled by the buyer, t timed out, p paid, r cancelled or timed out and
-- then paid (the payment refunded). A payment's own answer is kept under field
-- "<orderId>/<paymentId>" (0 taken, 2 refunded), so the same notice again gets the same
-- answer and changes nothing.
--
-- cancel/expire return 0 done now (unit returned, event queued), 1 already cancelled or
-- timed out (nothing returned twice), 2 paid (refused), 3 not this user's order, 5 the
-- voucher has no stock hash in this Redis (nothing changed).
-- pay returns 0 taken now (event p), 2 to refund now (the order was cancelled or timed out:
-- event r the first time; or it was paid by another payment), 10 / 12 the same payment
-- before (taken / refunded: nothing to do again), 3, 5 as above.
--
-- The event entry: field ev = "<c|t|p|r> <orderId> <userId> <ts> <ep>" (src/sale/sentry.h).
local op = ARGV[1]
if #KEYS ~= 5 or (op ~= 'pay' and #ARGV ~= 3) or (op == 'pay' and #ARGV ~= 4) or
   (op ~= 'cancel' and op ~= 'expire' and op ~= 'pay') then
  return redis.error_reply('ERR life.lua: bad arguments (KEYS voucher buyers ostate due ' ..
                           'stream, ARGV op orderId userId [paymentId])')
end
local oid, uid = ARGV[2], ARGV[3]
local due = oid .. ':' .. uid
-- the sweeper's entry is done with whatever the answer (a decided order, a bogus entry)
if op == 'expire' then redis.call('ZREM', KEYS[4], due) end
local function event(kind, ts, ep)
  redis.call('XADD', KEYS[5], '*', 'ev',
             kind .. ' ' .. oid .. ' ' .. uid .. ' ' .. ts .. ' ' .. (ep or '0'))
end
local fp
if op == 'pay' then
  fp = oid .. '/' .. ARGV[4]
  local prev = redis.call('HGET', KEYS[3], fp)
  if prev then return 10 + tonumber(prev) end
end
local st = redis.call('HGET', KEYS[3], oid)
if st then
  local kind, _, owner = string.match(st, '^(%a) (%d+) (%d+)$')
  if owner ~= uid then return 3 end
  if op ~= 'pay' then
    if kind == 'p' then return 2 end
    return 1
  end
  -- a payment for an order that cannot take it: refunded
  if kind == 'c' or kind == 't' then
    local ts = redis.call('TIME')[1]
    redis.call('HSET', KEYS[3], oid, 'r ' .. ts .. ' ' .. uid)
    event('r', ts, redis.call('HGET', KEYS[1], 'ep'))
  end
  redis.call('HSET', KEYS[3], fp, 2)
  return 2
end
local v = redis.call('HMGET', KEYS[1], 'stock', 'ep')
if not v[1] then return 5 end
-- an order still unpaid: its buyer hash names it (an order a rebuild from SQL brought
-- back has its buyer there too)
local held = redis.call('HGET', KEYS[2], uid)
if held ~= oid then return 3 end
local ts = redis.call('TIME')[1]
redis.call('ZREM', KEYS[4], due)
if op == 'pay' then
  redis.call('HSET', KEYS[3], oid, 'p ' .. ts .. ' ' .. uid, fp, 0)
  event('p', ts, v[2])
  return 0
end
local kind = op == 'cancel' and 'c' or 't'
redis.call('HSET', KEYS[3], oid, kind .. ' ' .. ts .. ' ' .. uid)
redis.call('HINCRBY', KEYS[1], 'stock', 1)
redis.call('HINCRBY', KEYS[1], 'returned', 1)
event(kind, ts, v[2])
return 0

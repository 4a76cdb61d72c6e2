-- life.lua: an admitted order's lifecycle decisions, atomic inside Redis, on the slot of
-- the buyer's stock bucket (the keys the order was admitted under; docs/lifecycle.md).
--
-- KEYS[1] seckill:voucher:{tag}  hash stock, ep, returned (units cancelled orders gave back)
-- KEYS[2] seckill:order:{tag}    hash userId -> orderId (admit.lua's buyers)
-- KEYS[3] seckill:ostate:{tag}   hash orderId -> "<state> <ts> <userId>": c cancelled by the
--                                buyer, t timed out (the state machine's memory: an order
--                                without a field is unpaid, status 1)
-- KEYS[4] seckill:due:{tag}      zset orderId by payment deadline (the timeout sweeper's)
-- KEYS[5] seckill:stream:{tag}   the bucket's order stream: the event goes behind the
--                                order's own entry, so the writer applies it after the insert
-- ARGV[1] op: 'cancel' (the buyer) or 'expire' (the payment deadline passed)
-- ARGV[2] orderId   ARGV[3] userId (the caller checked the order is this user's)
--
-- Returns 0 done now (unit returned, event queued), 1 already cancelled or timed out
-- (nothing returned twice), 2 paid (refused), 3 not this user's order, 5 the voucher has
-- no stock hash in this Redis (nothing changed).
--
-- The event entry: field ev = "<c|t> <orderId> <userId> <ts> <ep>" (src/sale/sentry.h).
if #KEYS ~= 5 or #ARGV ~= 3 or (ARGV[1] ~= 'cancel' and ARGV[1] ~= 'expire') then
  return redis.error_reply('ERR life.lua: bad arguments (KEYS voucher buyers ostate due ' ..
                           'stream, ARGV op orderId userId)')
end
local oid, uid = ARGV[2], ARGV[3]
local st = redis.call('HGET', KEYS[3], oid)
if st then
  local kind, _, owner = string.match(st, '^(%a) (%d+) (%d+)$')
  if owner ~= uid then return 3 end
  if kind == 'c' or kind == 't' then return 1 end
  return 2
end
local v = redis.call('HMGET', KEYS[1], 'stock', 'ep')
if not v[1] then return 5 end
-- an order still unpaid: its buyer hash names it (an order a rebuild from SQL brought
-- back has its buyer there too)
local held = redis.call('HGET', KEYS[2], uid)
if held ~= oid then return 3 end
local ts = redis.call('TIME')[1]
local kind = ARGV[1] == 'cancel' and 'c' or 't'
redis.call('HSET', KEYS[3], oid, kind .. ' ' .. ts .. ' ' .. uid)
redis.call('ZREM', KEYS[4], oid)
redis.call('HINCRBY', KEYS[1], 'stock', 1)
redis.call('HINCRBY', KEYS[1], 'returned', 1)
redis.call('XADD', KEYS[5], '*', 'ev',
           kind .. ' ' .. oid .. ' ' .. uid .. ' ' .. ts .. ' ' .. (v[2] or '0'))
return 0

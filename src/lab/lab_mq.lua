-- lab_mq.lua: one admission of the lab's list and pubsub transports (src/lab/lab_mq.c),
-- atomic inside Redis: the checks of src/sale/admit.lua for one buyer, then the order is
-- handed to the course's message queue instead of the voucher's stream.
--
-- KEYS[1] seckill:voucher:{id}  hash stock, begin, end (epoch seconds)
-- KEYS[2] seckill:order:{id}    hash userId -> orderId (one order per user; order lookups
--                               read it for orders not yet in SQL)
-- KEYS[3] the lab's list (LPUSH) or channel (PUBLISH)
-- ARGV    voucherId, transport ('list' or 'pubsub'), userId, orderId
--
-- Returns 0 admitted, 1 sold out, 2 already bought, 3 not started, 4 ended, 5 no such
-- flash-sale voucher -- admit.lua's codes, checked in its order. The message is
-- "orderId userId voucherId ts", ts being TIME's second, the clock the window was judged by.
local tr = ARGV[2]
if (tr ~= 'list' and tr ~= 'pubsub') or #ARGV ~= 4 or #KEYS ~= 3 then
  return redis.error_reply('ERR lab_mq.lua: bad arguments (KEYS voucher buyers queue, ' ..
                           'ARGV voucherId list|pubsub userId orderId)')
end
local v = redis.call('HMGET', KEYS[1], 'stock', 'begin', 'end')
local stock = tonumber(v[1])
if not stock then return 5 end
local now = tonumber(redis.call('TIME')[1])
if now < tonumber(v[2]) then return 3 end
if now >= tonumber(v[3]) then return 4 end
if stock <= 0 then return 1 end
local uid, oid = ARGV[3], ARGV[4]
if redis.call('HSETNX', KEYS[2], uid, oid) == 0 then return 2 end
local msg = oid .. ' ' .. uid .. ' ' .. ARGV[1] .. ' ' .. now
if tr == 'list' then redis.call('LPUSH', KEYS[3], msg) else redis.call('PUBLISH', KEYS[3], msg) end
redis.call('HINCRBY', KEYS[1], 'stock', -1)
return 0

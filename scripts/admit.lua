-- admit.lua: one flash-sale admission, atomic inside Redis.
--
-- KEYS[1] seckill:voucher:{id}  hash stock, begin, end (epoch seconds), ep (Redis generation)
-- KEYS[2] seckill:order:{id}    hash userId -> orderId (one order per user)
-- KEYS[3] seckill:stream:{id}   the voucher's order stream (consumer group g1)
-- ARGV[1] userId, ARGV[2] orderId, ARGV[3] voucherId
-- ARGV[4] optional: 'queue' = do not append to the stream (queue mode: the server keeps
--         the order in its own memory instead; see src/ordq.h for what that costs);
--         'list' / 'pubsub' = the lab's transports: LPUSH to / PUBLISH on KEYS[3] the
--         message "orderId userId voucherId ts" instead (src/lab_mq.c)
--
-- Returns 0 admitted, 1 sold out, 2 already bought, 3 not started, 4 ended,
-- 5 no such flash-sale voucher. The checks run in the course's order (stock before
-- duplicate), with the sale window checked first against Redis's own clock, so every
-- instance judges the window by the same time. Stock is taken, the buyer recorded and
-- the order queued in one step: there is no moment where stock is gone and the order
-- is not in the stream. Each entry carries ep, the voucher's Redis generation: after a rebuild
-- from SQL (src/rebuild.c) the writer refuses entries of the replaced state.
local v = redis.call('HMGET', KEYS[1], 'stock', 'begin', 'end', 'ep')
local stock = tonumber(v[1])
if not stock then return 5 end
local now = tonumber(redis.call('TIME')[1])
if now < tonumber(v[2]) then return 3 end
if now >= tonumber(v[3]) then return 4 end
if stock <= 0 then return 1 end
if redis.call('HSETNX', KEYS[2], ARGV[1], ARGV[2]) == 0 then return 2 end
redis.call('HINCRBY', KEYS[1], 'stock', -1)
if ARGV[4] == 'list' or ARGV[4] == 'pubsub' then
  -- the lab's transports (src/lab_mq.c): KEYS[3] is then the list / the channel
  local msg = ARGV[2] .. ' ' .. ARGV[1] .. ' ' .. ARGV[3] .. ' ' .. now
  if ARGV[4] == 'list' then redis.call('LPUSH', KEYS[3], msg) else redis.call('PUBLISH', KEYS[3], msg) end
elseif ARGV[4] ~= 'queue' then
  redis.call('XADD', KEYS[3], '*', 'id', ARGV[2], 'userId', ARGV[1], 'voucherId', ARGV[3], 'ts', now,
             'ep', v[4] or '0')
end
return 0

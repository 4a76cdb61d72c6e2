-- rebuild.lua: the last step of rebuilding one voucher's Redis keys from SQL
-- (src/rebuild/rebuild.c), atomic inside Redis. Every key has the voucher's hash tag {id}.
--
-- KEYS[1] seckill:voucher:{id}         the voucher hash (stock, begin, end, ep, seeded)
-- KEYS[2] seckill:order:{id}           buyers: userId -> orderId
-- KEYS[3] seckill:stream:{id}          the order stream (consumer group ARGV[7])
-- KEYS[4] seckill:rebuild:{id}         the rebuild lock, holding its owner's token
-- KEYS[5] seckill:rebuild:buyers:{id}  the buyers the rebuild prepared (may not exist)
-- KEYS[6] seckill:ostate:{id}          the order states (src/order/life.lua)
-- KEYS[7] seckill:rebuild:ostate:{id}  the states the rebuild prepared (may not exist)
-- ARGV: token, stock, begin, end, ep, seeded, group, buckets, returned, room_r, room_ttl,
-- room_gate, paid, timedout, freed
-- (returned: the orders cancelled, timed out or refunded, holding no unit; paid, timedout:
-- life.lua's counters for the board; freed: of the returned, those whose buyer was freed
-- and is not in the buyers -- src/rebuild/rebuild_life.h)
-- (buckets: K of a voucher in stock buckets, written as the hash's `buckets` field; the
-- keys are then one bucket's, under its own tag: docs/redis-cluster.md; room_r > 0: the
-- voucher's waiting room, src/room/room.lua, written as the hash's room_* fields)
--
-- Returns 1 published, 0 the voucher was already there (someone else rebuilt or published
-- it: nothing is changed), -1 the lock is no longer ours (nothing is changed).
-- The voucher hash is written last, in the same step as the buyers, so admission (which
-- answers "no such voucher" while the hash has no stock) never sees a half-built voucher.
if redis.call('GET', KEYS[4]) ~= ARGV[1] then
  redis.call('DEL', KEYS[5], KEYS[7])
  return -1
end
if redis.call('HEXISTS', KEYS[1], 'stock') == 1 then
  redis.call('DEL', KEYS[5], KEYS[7], KEYS[4])
  return 0
end
if redis.call('EXISTS', KEYS[5]) == 1 then
  redis.call('RENAME', KEYS[5], KEYS[2])
else
  redis.call('DEL', KEYS[2])
end
-- the staged states hold what a surviving state hash had (the rebuild merged it in)
if redis.call('EXISTS', KEYS[7]) == 1 then
  redis.call('RENAME', KEYS[7], KEYS[6])
else
  redis.call('DEL', KEYS[6])
end
local g = redis.pcall('XGROUP', 'CREATE', KEYS[3], ARGV[7], '0', 'MKSTREAM')
if type(g) == 'table' and g.err and not string.find(g.err, 'BUSYGROUP', 1, true) then
  return redis.error_reply(g.err)
end
if ARGV[8] and tonumber(ARGV[8]) > 1 then
  redis.call('HSET', KEYS[1], 'buckets', ARGV[8])
end
if ARGV[10] and tonumber(ARGV[10]) > 0 then
  redis.call('HSET', KEYS[1], 'room_r', ARGV[10], 'room_ttl', ARGV[11], 'room_gate', ARGV[12])
end
redis.call('HSET', KEYS[1], 'begin', ARGV[3], 'end', ARGV[4], 'ep', ARGV[5],
           'seeded', ARGV[6], 'returned', ARGV[9], 'paid', ARGV[13], 'timedout', ARGV[14],
           'freed', ARGV[15] or '0', 'stock', ARGV[2])
redis.call('DEL', KEYS[4])
return 1

-- board.lua -- the sale board's one round trip to Redis: announce this instance, and
-- (when a board asked) read every live instance's snapshot and every sale's stock.
--
-- ARGV[1] instance name, ARGV[2] its snapshot (JSON text, board.c), ARGV[3] TTL in ms,
-- ARGV[4] "1" to return the board, anything else to only announce.
-- Returns 1, or { {snapshot, ...}, { {id, stock, begin, end, buyers}, ... } }.
--
-- Instances announce themselves with a TTL: seckill:board:instance:<name> expires unless
-- renewed (every second), so a dead instance drops off the board within the TTL; the set
-- seckill:board:instances only lists names to look at and is pruned here. The keys are
-- named in the script (the board spans every voucher), like the writers' read of every
-- stream: a single Redis, not a Redis Cluster.
local pre = 'seckill:board:instance:'
local set = 'seckill:board:instances'
redis.call('SET', pre .. ARGV[1], ARGV[2], 'PX', ARGV[3])
redis.call('SADD', set, ARGV[1])
if ARGV[4] ~= '1' then
    return 1
end
local insts = {}
for _, n in ipairs(redis.call('SMEMBERS', set)) do
    local v = redis.call('GET', pre .. n)
    if v then
        insts[#insts + 1] = v
    else
        redis.call('SREM', set, n)
    end
end
local sales = {}
for _, id in ipairs(redis.call('SMEMBERS', 'seckill:streams')) do
    local h = redis.call('HMGET', 'seckill:voucher:{' .. id .. '}', 'stock', 'begin', 'end')
    local buyers = redis.call('HLEN', 'seckill:order:{' .. id .. '}')
    sales[#sales + 1] = { id, h[1] or '', h[2] or '', h[3] or '', buyers }
end
return { insts, sales }

-- board.lua -- the sale board's instance announcements: announce this instance, and
-- (when a board asked) read every live instance's snapshot.
--
-- KEYS[1] the set of instance names (seckill:{board}:instances); ARGV[1] instance name,
-- ARGV[2] its snapshot (JSON text, board.c), ARGV[3] TTL in ms, ARGV[4] "1" to return the
-- snapshots, anything else to only announce.
-- Returns 1, or { snapshot, ... }.
--
-- Instances announce themselves with a TTL: seckill:{board}:instance:<name> expires unless
-- renewed (every second), so a dead instance drops off the board within the TTL; the set
-- only lists names to look at and is pruned here. The instance keys are named here, not
-- in KEYS (there is one per instance), but they share the set's hash tag {board}: on a
-- Redis Cluster every key this script touches lives in the set's slot. The sales' stock
-- is read per voucher by api_board.c (each voucher has its own slot).
local set = KEYS[1]
local pre = 'seckill:{board}:instance:'
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
return insts

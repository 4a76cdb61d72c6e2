-- admit_batch.lua: several flash-sale admissions of one voucher in one call, atomic.
--
-- The same decision as admit.lua (stream mode) for each buyer in turn, as if admit.lua
-- had run once per buyer back to back -- one TIME, one read of the voucher and one stock
-- write for the whole batch instead of one each, and one script call: that per-call cost
-- is most of what an admission costs Redis (docs/bench.md). src/admission.c sends a batch
-- when admissions of a voucher queue up behind the one in flight on a worker.
--
-- KEYS[1] seckill:voucher:{id}  KEYS[2] seckill:order:{id}  KEYS[3] seckill:stream:{id}
-- ARGV[1] voucherId, then userId, orderId for each buyer
-- Returns one code per buyer, in order (the codes of admit.lua).
local n = (#ARGV - 1) / 2
local out = {}
-- Each entry carries ep, the voucher's Redis generation (see admit.lua and src/rebuild.c).
local v = redis.call('HMGET', KEYS[1], 'stock', 'begin', 'end', 'ep')
local ep = v[4] or '0'
local stock = tonumber(v[1])
local code
local now = 0
if not stock then
  code = 5
else
  now = tonumber(redis.call('TIME')[1])
  if now < tonumber(v[2]) then code = 3 elseif now >= tonumber(v[3]) then code = 4 end
end
if code then
  for i = 1, n do out[i] = code end
  return out
end
local taken = 0
for i = 1, n do
  local uid, oid = ARGV[2 * i], ARGV[2 * i + 1]
  if stock - taken <= 0 then
    out[i] = 1
  elseif redis.call('HSETNX', KEYS[2], uid, oid) == 0 then
    out[i] = 2
  else
    taken = taken + 1
    redis.call('XADD', KEYS[3], '*', 'id', oid, 'userId', uid, 'voucherId', ARGV[1], 'ts', now,
               'ep', ep)
    out[i] = 0
  end
end
if taken > 0 then redis.call('HINCRBY', KEYS[1], 'stock', -taken) end
return out

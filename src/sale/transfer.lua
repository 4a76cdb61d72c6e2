-- transfer.lua: moving stock units between two buckets of one voucher (src/sale/buckets.c).
-- Each step is atomic on one bucket's node; the two sides are joined by a transfer id
-- logged on the donor until the receiver has applied it, so a crash between them loses
-- and creates nothing (docs/redis-cluster.md, "Stock buckets"):
--
-- ARGV[1] = 'take'   KEYS[1] donor voucher hash, KEYS[2] donor transfer log
--   ARGV[2] transfer id, ARGV[3] receiver bucket, ARGV[4] units wanted. Takes half the
--   donor's stock (rounded up), or the units wanted if more, at most all of it (none when
--   it has none or no voucher hash) and logs "<receiver> <units> <ms>" under the id.
--   Returns {units taken, log entries before this one}.
-- ARGV[1] = 'apply'  KEYS[1] receiver voucher hash, KEYS[2] receiver applied-id set
--   ARGV[2] transfer id, ARGV[3] units. Returns 1 applied, 0 applied before (nothing
--   changes: a replay), -1 no voucher hash here (nothing changes).
-- ARGV[1] = 'stale'  KEYS[1] donor voucher hash, KEYS[2] donor transfer log
--   ARGV[2] age ms. Returns id, receiver, units, ... of the entries logged longer ago.
-- ARGV[1] = 'cancel' KEYS[1] donor voucher hash, KEYS[2] donor transfer log
--   ARGV[2] transfer id: the units go back to the donor (for a receiver that has no
--   voucher hash, so never applied it). Returns the units, 0 if the id is not logged.
local step = ARGV[1]
local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
if step == 'take' then
  local stock = tonumber(redis.call('HGET', KEYS[1], 'stock'))
  local before = redis.call('HLEN', KEYS[2])
  if not stock or stock <= 0 then return {0, before} end
  local n = math.max(math.floor((stock + 1) / 2), tonumber(ARGV[4]) or 1)
  if n > stock then n = stock end
  redis.call('HINCRBY', KEYS[1], 'stock', -n)
  redis.call('HSET', KEYS[2], ARGV[2], ARGV[3] .. ' ' .. n .. ' ' .. now_ms())
  return {n, before}
elseif step == 'apply' then
  if redis.call('HEXISTS', KEYS[1], 'stock') == 0 then return -1 end
  if redis.call('SADD', KEYS[2], ARGV[2]) == 0 then return 0 end
  redis.call('HINCRBY', KEYS[1], 'stock', tonumber(ARGV[3]))
  return 1
elseif step == 'stale' then
  local out = {}
  local limit = now_ms() - tonumber(ARGV[2])
  local all = redis.call('HGETALL', KEYS[2])
  for i = 1, #all, 2 do
    local recv, n, ms = string.match(all[i + 1], '^(%d+) (%d+) (%d+)$')
    if recv and tonumber(ms) <= limit then
      out[#out + 1] = all[i]; out[#out + 1] = recv; out[#out + 1] = n
    end
  end
  return out
elseif step == 'cancel' then
  local v = redis.call('HGET', KEYS[2], ARGV[2])
  if not v then return 0 end
  local n = tonumber(string.match(v, '^%d+ (%d+) '))
  redis.call('HDEL', KEYS[2], ARGV[2])
  if n and redis.call('HEXISTS', KEYS[1], 'stock') == 1 then
    redis.call('HINCRBY', KEYS[1], 'stock', n)
    return n
  end
  return 0
end
return redis.error_reply('transfer.lua: unknown step')

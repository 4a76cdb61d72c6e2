-- room.lua: a voucher's waiting room, one call per join or poll (src/room/room.c), atomic
-- inside Redis. Every key has the voucher's hash tag {id}: on a cluster the room lives in
-- its voucher's slot.
--
-- KEYS[1] seckill:voucher:{id}      the voucher hash: stock, begin, end (epoch s), room_r
--                                   (passes per second), room_ttl (pass lifetime, s),
--                                   room_seq (the FIFO counter of joins after begin)
-- KEYS[2] seckill:room:{id}         zset userId -> score: a join before begin scores a
--                                   uniform random number in [0, 1) (ARGV[3]), a join after
--                                   it 1 + room_seq: at begin the early joiners stand in a
--                                   uniformly shuffled order, the late ones behind them in
--                                   arrival order
-- KEYS[3] seckill:room:issued:{id}  hash userId -> ms of the user's first admission: the
--                                   pass's expiry is that + room_ttl (the same pass on every
--                                   poll); HLEN = passes issued
-- ARGV[1] 'join' | 'poll', ARGV[2] userId, ARGV[3] (join) the random score
--
-- Passes are released at room_r per second from begin, by Redis's clock alone:
-- released = floor((now - begin) * room_r), the same on every instance, so no coordinator
-- is needed: the member of rank k (0-based) is admitted once k < released.
--
-- Passes are counted for the sale board (api_board.c) when first issued, by the pass
-- lifetime's generation of Redis's clock g = floor(now_ms / ttl_ms), in four fields of
-- the voucher hash: room_g (the newest generation counted), room_gc (passes issued in it),
-- room_gp (in the one before), room_go (in all older ones). A pass of a generation older
-- than the one before now's has expired. Only a first issue writes them (one HMGET and
-- one HSET inside this call): a poll stays one command.
--
-- Returns {state, rank, released, room_r, begin, now_ms, expires_ms}: state 0 waiting,
-- 1 admitted, 2 sold out or ended (no more passes), 3 not queued (never joined, or the pass
-- expired: joining again queues at the back); or {code} alone: 10 no such voucher, 11 no
-- waiting room, 12 ended (join), 13 sold out (join).
local v = redis.call('HMGET', KEYS[1], 'stock', 'begin', 'end', 'room_r', 'room_ttl')
local stock = tonumber(v[1])
if not stock then return {10} end
local r = tonumber(v[4])
if not r or r <= 0 then return {11} end
local begin, fin, ttl = tonumber(v[2]), tonumber(v[3]), (tonumber(v[5]) or 60) * 1000
local t = redis.call('TIME')
local now_ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local uid = ARGV[2]
if ARGV[1] == 'join' then
  if now_ms >= fin * 1000 then return {12} end
  if stock <= 0 then return {13} end
  local score = redis.call('ZSCORE', KEYS[2], uid)
  local issued = tonumber(redis.call('HGET', KEYS[3], uid))
  if issued and issued + ttl <= now_ms then
    -- the pass expired unused: the place is gone, a new one is at the back
    redis.call('HDEL', KEYS[3], uid)
    score = nil
    redis.call('ZREM', KEYS[2], uid)
  end
  if not score then
    if now_ms < begin * 1000 then
      score = ARGV[3]
    else
      score = 1 + redis.call('HINCRBY', KEYS[1], 'room_seq', 1)
    end
    redis.call('ZADD', KEYS[2], score, uid)
  end
end
local released = 0
if now_ms >= begin * 1000 then released = math.floor((now_ms - begin * 1000) * r / 1000) end
if stock <= 0 or now_ms >= fin * 1000 then return {2, 0, released, r, begin, now_ms, 0} end
-- a poll learns whether the user has a place from ZRANK alone (nil: none)
local rank = redis.call('ZRANK', KEYS[2], uid)
if not rank then return {3, 0, released, r, begin, now_ms, 0} end
if rank >= released then return {0, rank, released, r, begin, now_ms, 0} end
local issued = now_ms
if redis.call('HSETNX', KEYS[3], uid, now_ms) == 0 then
  issued = tonumber(redis.call('HGET', KEYS[3], uid))
else
  local c = redis.call('HMGET', KEYS[1], 'room_g', 'room_gc', 'room_gp', 'room_go')
  local g = math.floor(now_ms / ttl)
  local cg = tonumber(c[1]) or g
  local gc, gp, go = tonumber(c[2]) or 0, tonumber(c[3]) or 0, tonumber(c[4]) or 0
  if g == cg + 1 then
    go, gp, gc = go + gp, gc, 0
  elseif g > cg + 1 then
    go, gp, gc = go + gp + gc, 0, 0
  end
  if g < cg then g = cg end   -- a clock step back: counted in the newest generation
  redis.call('HSET', KEYS[1], 'room_g', g, 'room_gc', gc + 1, 'room_gp', gp, 'room_go', go)
end
if issued + ttl <= now_ms then return {3, rank, released, r, begin, now_ms, 0} end
return {1, rank, released, r, begin, now_ms, issued + ttl}

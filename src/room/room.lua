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
-- KEYS[3] seckill:room:issued:{id}  hash userId -> ms of the user's pass's start: the pass
--                                   is valid from it until it + room_ttl (the same pass on
--                                   every poll); HLEN = passes issued
-- ARGV[1] 'join' | 'poll', ARGV[2] userId, ARGV[3] (join) the random score
--
-- Passes are released at room_r per second from begin, by Redis's clock alone:
-- released = floor((now - begin) * room_r), the same on every instance, so no coordinator
-- is needed: the member of rank k (0-based) is admitted once k < released, that is from
-- its due moment due = begin + ceil((k + 1) * 1000 / room_r) ms. After begin nobody new
-- comes ahead and the clock alone releases places, so a waiting place's due moment is
-- known: a poll (or join) that finds it within one pass lifetime of now hands out the pass
-- at once, starting at the due moment (HSETNX: a re-poll gets the same one), and the buyer
-- need not poll again. Within one lifetime: the pass's whole life lies within two
-- lifetimes of its issue, and its generation (below) is now's or the next. A place
-- already due gets a pass starting now. Before begin no pass: later joiners may still
-- draw places ahead.
--
-- Passes are counted for the sale board (api_board.c) when first issued, by the pass
-- lifetime's generation of their start g = floor(start_ms / ttl_ms) (now's or the next),
-- in five fields of the voucher hash, relative to room_g (now's generation at the last
-- count, Redis's clock): room_ga (passes starting in room_g + 1), room_gc (in room_g),
-- room_gp (in room_g - 1), room_go (all older). A pass of a generation older than the one
-- before now's has expired (it ends start + ttl). Only a first issue writes them (one
-- HMGET and one HSET inside this call): a poll stays one command.
--
-- Returns {state, rank, released, room_r, begin, now_ms, expires_ms, from_ms, ttl_ms}:
-- state 0 waiting (with a pass when from_ms > 0: valid from from_ms, later than now),
-- 1 admitted (the pass valid now), 2 sold out or ended (no more passes), 3 not queued
-- (never joined, or the pass expired: joining again queues at the back); or {code} alone:
-- 10 no such voucher, 11 no waiting room, 12 ended (join), 13 sold out (join).
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
if stock <= 0 or now_ms >= fin * 1000 then return {2, 0, released, r, begin, now_ms, 0, 0, ttl} end
-- a poll learns whether the user has a place from ZRANK alone (nil: none)
local rank = redis.call('ZRANK', KEYS[2], uid)
if not rank then return {3, 0, released, r, begin, now_ms, 0, 0, ttl} end
local start = now_ms
if rank >= released then
  if now_ms < begin * 1000 then return {0, rank, released, r, begin, now_ms, 0, 0, ttl} end
  start = begin * 1000 + math.ceil((rank + 1) * 1000 / r)
  if start - now_ms > ttl then return {0, rank, released, r, begin, now_ms, 0, 0, ttl} end
end
local issued = start
if redis.call('HSETNX', KEYS[3], uid, start) == 0 then
  issued = tonumber(redis.call('HGET', KEYS[3], uid))
else
  local c = redis.call('HMGET', KEYS[1], 'room_g', 'room_ga', 'room_gc', 'room_gp', 'room_go')
  local g = math.floor(now_ms / ttl)
  local cg = tonumber(c[1]) or g
  local ga, gc = tonumber(c[2]) or 0, tonumber(c[3]) or 0
  local gp, go = tonumber(c[4]) or 0, tonumber(c[5]) or 0
  if g < cg then g = cg end   -- a clock step back: counted as of the newest generation
  for _ = 1, math.min(g - cg, 3) do
    go, gp, gc, ga = go + gp, gc, ga, 0
  end
  if math.floor(start / ttl) > g then ga = ga + 1 else gc = gc + 1 end
  redis.call('HSET', KEYS[1], 'room_g', g, 'room_ga', ga, 'room_gc', gc, 'room_gp', gp,
             'room_go', go)
end
if issued + ttl <= now_ms then return {3, rank, released, r, begin, now_ms, 0, 0, ttl} end
if issued > now_ms then return {0, rank, released, r, begin, now_ms, issued + ttl, issued, ttl} end
return {1, rank, released, r, begin, now_ms, issued + ttl, issued, ttl}

-- login_code.lua: a phone's login code, who may still guess it, and how many codes the
-- phone may be sent -- all atomic in Redis, exact across instances.
--
-- KEYS[1] login:code:<phone>            string: the code (the course's key)
-- KEYS[2] {login:code:<phone>}:fails    counter: wrong guesses against that code
-- KEYS[3] {login:code:<phone>}:guess    hash: owner = the client that asked for the code,
--                                       c:<client> = that client's wrong guesses,
--                                       others = wrong guesses by clients but the owner
-- KEYS[4] {login:code:<phone>}:sent     hash: tok, ms = the phone's code bucket;
--                                       d, d0 = codes sent in the 24 hours from d0
-- Every hash tag is the whole first key: one Redis Cluster slot per phone. KEYS[2] and
-- KEYS[3] live exactly as long as the code; KEYS[4] as long as it has something to say.
--
-- ARGV[1] 'issue': ARGV[2] the new code ('' = only take the phone's allowance: the caller
--         delivers first, then stores), ARGV[3] its TTL in seconds, ARGV[4] the client,
--         ARGV[5] codes per second per phone (0 = no bucket), ARGV[6] the bucket's burst,
--         ARGV[7] codes per phone per 24 hours (0 = no cap). Returns
--          1 the phone may have a code (it is stored when ARGV[2] is not '');
--         -2 the phone's bucket is empty; -3 the phone had its codes for the day.
-- ARGV[1] 'store': ARGV[2] the code, ARGV[3] TTL, ARGV[4] the client. Returns 1.
--         Storing a code forgets every guess made against the one before: the client
--         that asked for it (and received it) starts with a full budget.
-- ARGV[1] 'check': ARGV[2] the submitted code, ARGV[3] the client, ARGV[4] wrong guesses
--         the owner may make, ARGV[5] wrong guesses any other client may make, ARGV[6]
--         wrong guesses all other clients together may make. Returns
--          1 right: the code is used up (deleted with its counters: one use only);
--          0 wrong: counted (for the client, and in the total);
--          2 wrong, the owner's last guess allowed: the code is deleted;
--          3 not compared: this client (not the owner) or all other clients together
--            have no guesses left against this code; the owner still has its own;
--         -1 there is no code (never sent, expired, used or invalidated): not counted.
-- So at most ARGV[4] + ARGV[6] wrong guesses reach any one code, and no client other
-- than the owner can spend the owner's.
local DAY_MS = 86400000

local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

local function store(code, ttl, client)
  redis.call('SET', KEYS[1], code, 'EX', ttl)
  redis.call('DEL', KEYS[2], KEYS[3])
  redis.call('HSET', KEYS[3], 'owner', client)
  redis.call('EXPIRE', KEYS[3], ttl)
end

-- Takes one code from the phone's bucket and its day. 1, -2 or -3 (see above).
local function allowance(per_s, burst, cap)
  if per_s <= 0 and cap <= 0 then return 1 end
  local now = now_ms()
  local s = redis.call('HMGET', KEYS[4], 'tok', 'ms', 'd', 'd0')
  local d, d0 = tonumber(s[3]) or 0, tonumber(s[4]) or now
  if now - d0 >= DAY_MS or now < d0 then d, d0 = 0, now end
  if cap > 0 and d >= cap then return -3 end
  local tok, ms, refill = burst, tonumber(s[2]) or now, 0
  if per_s > 0 then
    tok = tonumber(s[1]) or burst
    if now > ms then tok = math.min(burst, tok + (now - ms) * per_s / 1000) end
    if tok < 1 then return -2 end
    tok = tok - 1
    refill = math.ceil((burst - tok) * 1000 / per_s)
  end
  if now > ms then ms = now end
  redis.call('HSET', KEYS[4], 'tok', tok, 'ms', ms, 'd', d + 1, 'd0', d0)
  local keep = d0 + DAY_MS - now
  if cap <= 0 or refill > keep then keep = refill end
  redis.call('PEXPIRE', KEYS[4], math.max(keep, 1000))
  return 1
end

if ARGV[1] == 'issue' then
  local ok = allowance(tonumber(ARGV[5]), tonumber(ARGV[6]), tonumber(ARGV[7]))
  if ok == 1 and ARGV[2] ~= '' then store(ARGV[2], ARGV[3], ARGV[4]) end
  return ok
end
if ARGV[1] == 'store' then
  store(ARGV[2], ARGV[3], ARGV[4])
  return 1
end
local code = redis.call('GET', KEYS[1])
if not code then return -1 end
local client = ARGV[3]
local g = redis.call('HMGET', KEYS[3], 'owner', 'c:' .. client, 'others')
local mine = g[1] == client
if not mine and ((tonumber(g[2]) or 0) >= tonumber(ARGV[5]) or
                 (tonumber(g[3]) or 0) >= tonumber(ARGV[6])) then
  return 3
end
if code == ARGV[2] then
  redis.call('DEL', KEYS[1], KEYS[2], KEYS[3])
  return 1
end
redis.call('INCR', KEYS[2])
local n = redis.call('HINCRBY', KEYS[3], 'c:' .. client, 1)
if mine and n >= tonumber(ARGV[4]) then
  redis.call('DEL', KEYS[1], KEYS[2], KEYS[3])
  return 2
end
if not mine then redis.call('HINCRBY', KEYS[3], 'others', 1) end
local ttl = redis.call('PTTL', KEYS[1])
if ttl > 0 then
  redis.call('PEXPIRE', KEYS[2], ttl)
  redis.call('PEXPIRE', KEYS[3], ttl)
end
return 0

-- login_code.lua: a login code and the wrong guesses made against it, atomic in Redis.
--
-- KEYS[1] login:code:<phone>            string: the code (the course's key)
-- KEYS[2] {login:code:<phone>}:fails    counter: wrong guesses against that code
-- The second key's hash tag is the whole first key, so both sit in one Redis Cluster
-- slot, and every phone's keys land on a slot of their own.
--
-- ARGV[1] 'issue': ARGV[2] the new code, ARGV[3] its TTL in seconds. Stores the code and
--         forgets the guesses made against any earlier one. Returns 1.
-- ARGV[1] 'check': ARGV[2] the submitted code, ARGV[3] wrong guesses allowed. Returns
--          1 right: the code is used up (deleted with its counter: one use only);
--          0 wrong: counted (the counter lives exactly as long as the code);
--          2 wrong, and it was the last guess allowed: the code is deleted;
--         -1 there is no code (never sent, expired, used or invalidated): not counted.
if ARGV[1] == 'issue' then
  redis.call('SET', KEYS[1], ARGV[2], 'EX', ARGV[3])
  redis.call('DEL', KEYS[2])
  return 1
end
local code = redis.call('GET', KEYS[1])
if not code then return -1 end
if code == ARGV[2] then
  redis.call('DEL', KEYS[1], KEYS[2])
  return 1
end
local n = redis.call('INCR', KEYS[2])
if n >= tonumber(ARGV[3]) then
  redis.call('DEL', KEYS[1], KEYS[2])
  return 2
end
local ttl = redis.call('PTTL', KEYS[1])
if ttl > 0 then redis.call('PEXPIRE', KEYS[2], ttl) end
return 0

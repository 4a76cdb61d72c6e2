/*
 * rlock_scripts.c -- the Lua scripts of rlock, one static string each.
 *
 * Every lock operation is one script so that it is atomic on the server.  The
 * scripts are SCRIPT LOADed when a connection is made and sent as EVALSHA
 * (rlock.c reloads them on NOSCRIPT).  Conventions shared by all of them:
 *   - acquire scripts return {1, hold_count, fence} when granted and
 *     {0, hint_ms} when not: hint = how long the blocker may last (PTTL or a
 *     deadline - now), -2 = gone (retry now), -3 = wait for a notification;
 *   - release scripts take (owner, mode, expected) where mode is
 *       'n' normal:  drop one hold,
 *       'r' retry:   a hold count of expected-1 means the first send already
 *                    applied (idempotent replay without a latch key); this is
 *                    reported as -10 - remaining,
 *       'u' undo:    drop one hold only if the count is exactly `expected`
 *                    (compensates an acquire whose reply was lost),
 *     and return the remaining count (>= 0), -1 when the owner holds nothing,
 *     -3 when an undo did not apply;
 *   - time inside scripts is the server's TIME, never a client clock.
 */
#include "rlock_int.h"

/* ---- reentrant lock: KEYS lock, fence | channel ------------------------- */

/* KEYS[1] lock hash, KEYS[2] fence; ARGV[1] owner, ARGV[2] lease ms */
static const char acq_lua[] =
    "if redis.call('exists', KEYS[1]) == 0 then\n"
    "  redis.call('hset', KEYS[1], ARGV[1], 1)\n"
    "  redis.call('pexpire', KEYS[1], ARGV[2])\n"
    "  return {1, 1, redis.call('incr', KEYS[2])}\n"
    "end\n"
    "if redis.call('hexists', KEYS[1], ARGV[1]) == 1 then\n"
    "  local c = redis.call('hincrby', KEYS[1], ARGV[1], 1)\n"
    "  redis.call('pexpire', KEYS[1], ARGV[2])\n"
    "  return {1, c, tonumber(redis.call('get', KEYS[2]) or '0')}\n"
    "end\n"
    "return {0, redis.call('pttl', KEYS[1])}\n";

/* KEYS[1] lock hash, KEYS[2] channel; ARGV owner, mode, expected, lease */
static const char rel_lua[] =
    "local c = tonumber(redis.call('hget', KEYS[1], ARGV[1]))\n"
    "if not c then return -1 end\n"
    "local e = tonumber(ARGV[3])\n"
    "if ARGV[2] == 'r' and c == e - 1 then return -10 - c end\n"
    "if ARGV[2] == 'u' and c ~= e then return -3 end\n"
    "if c > 1 then\n"
    "  redis.call('hincrby', KEYS[1], ARGV[1], -1)\n"
    "  redis.call('pexpire', KEYS[1], ARGV[4])\n"
    "  return c - 1\n"
    "end\n"
    "redis.call('del', KEYS[1])\n"
    "redis.call('publish', KEYS[2], '')\n"
    "return 0\n";

/* KEYS[1] lock key, KEYS[2] channel; ARGV[1] message */
static const char force_lua[] =
    "if redis.call('del', KEYS[1]) == 1 then\n"
    "  redis.call('publish', KEYS[2], ARGV[1])\n"
    "  return 1\n"
    "end\n"
    "return 0\n";

/* ---- simple lock -------------------------------------------------------- */

/* KEYS[1] lock string, KEYS[2] fence; ARGV token, lease */
static const char sacq_fenced_lua[] =
    "if redis.call('set', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then\n"
    "  return {1, 1, redis.call('incr', KEYS[2])}\n"
    "end\n"
    "return {0, redis.call('pttl', KEYS[1])}\n";

/* compare-and-delete.  KEYS[1] lock string, KEYS[2] channel; ARGV token */
static const char srel_lua[] =
    "if redis.call('get', KEYS[1]) == ARGV[1] then\n"
    "  redis.call('del', KEYS[1])\n"
    "  redis.call('publish', KEYS[2], '')\n"
    "  return 0\n"
    "end\n"
    "return -1\n";

/* The benchmark baseline: compare-and-delete without notification. */
static const char cad_lua[] =
    "if redis.call('get', KEYS[1]) == ARGV[1] then\n"
    "  return redis.call('del', KEYS[1])\n"
    "end\n"
    "return 0\n";

/* ---- fair lock: KEYS lock, queue (list), deadlines (zset), fence, channel */

#define NOW_LUA \
    "local t = redis.call('time')\n" \
    "local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)\n"

/* Drop waiters whose heartbeat deadline passed; returns true if any. */
#define FAIR_PURGE_LUA \
    "local function purge()\n" \
    "  local dead = redis.call('zrangebyscore', KEYS[3], '-inf', now)\n" \
    "  for _, o in ipairs(dead) do\n" \
    "    redis.call('lrem', KEYS[2], 0, o)\n" \
    "    redis.call('zrem', KEYS[3], o)\n" \
    "  end\n" \
    "  return #dead > 0\n" \
    "end\n"

/* ARGV owner, lease, waiter_ttl, enqueue('1'|'0') */
static const char facq_lua[] =
    NOW_LUA FAIR_PURGE_LUA
    "local purged = purge()\n"
    "local c = redis.call('hget', KEYS[1], ARGV[1])\n"
    "if c then\n"
    "  c = redis.call('hincrby', KEYS[1], ARGV[1], 1)\n"
    "  redis.call('pexpire', KEYS[1], ARGV[2])\n"
    "  return {1, c, tonumber(redis.call('get', KEYS[4]) or '0')}\n"
    "end\n"
    "local free = redis.call('exists', KEYS[1]) == 0\n"
    "local head = redis.call('lindex', KEYS[2], 0)\n"
    "if free and ((not head) or head == ARGV[1]) then\n"
    "  if head then\n"
    "    redis.call('lpop', KEYS[2])\n"
    "    redis.call('zrem', KEYS[3], ARGV[1])\n"
    "  end\n"
    "  redis.call('hset', KEYS[1], ARGV[1], 1)\n"
    "  redis.call('pexpire', KEYS[1], ARGV[2])\n"
    "  return {1, 1, redis.call('incr', KEYS[4])}\n"
    "end\n"
    "if free and purged and head then redis.call('publish', KEYS[5], head) end\n"
    "if ARGV[4] == '1' then\n"
    "  local wt = tonumber(ARGV[3])\n"
    "  if redis.call('zadd', KEYS[3], now + wt, ARGV[1]) == 1 then\n"
    "    redis.call('rpush', KEYS[2], ARGV[1])\n"
    "  end\n"
    "  for i = 2, 3 do\n"
    "    if redis.call('pttl', KEYS[i]) < wt then redis.call('pexpire', KEYS[i], wt) end\n"
    "  end\n"
    "end\n"
    "if free then return {0, -3} end\n"
    "return {0, redis.call('pttl', KEYS[1])}\n";

/* KEYS lock, queue, deadlines, channel; ARGV owner, mode, expected, lease */
static const char frel_lua[] =
    NOW_LUA FAIR_PURGE_LUA
    "local c = tonumber(redis.call('hget', KEYS[1], ARGV[1]))\n"
    "if not c then return -1 end\n"
    "local e = tonumber(ARGV[3])\n"
    "if ARGV[2] == 'r' and c == e - 1 then return -10 - c end\n"
    "if ARGV[2] == 'u' and c ~= e then return -3 end\n"
    "if c > 1 then\n"
    "  redis.call('hincrby', KEYS[1], ARGV[1], -1)\n"
    "  redis.call('pexpire', KEYS[1], ARGV[4])\n"
    "  return c - 1\n"
    "end\n"
    "redis.call('del', KEYS[1])\n"
    "purge()\n"
    "local head = redis.call('lindex', KEYS[2], 0)\n"
    "if head then redis.call('publish', KEYS[4], head) end\n"
    "return 0\n";

/* A waiter gives up: leave the queue; if the lock is free, wake the new head.
 * KEYS lock, queue, deadlines, channel; ARGV owner */
static const char fcancel_lua[] =
    NOW_LUA FAIR_PURGE_LUA
    "redis.call('lrem', KEYS[2], 0, ARGV[1])\n"
    "redis.call('zrem', KEYS[3], ARGV[1])\n"
    "purge()\n"
    "if redis.call('exists', KEYS[1]) == 0 then\n"
    "  local head = redis.call('lindex', KEYS[2], 0)\n"
    "  if head then redis.call('publish', KEYS[4], head) end\n"
    "end\n"
    "return 0\n";

/* ---- read-write lock ---------------------------------------------------- */
/*
 * KEYS[1] hash H:  w = writer owner, wc = write holds, wd = writer deadline,
 *                  rc:<owner> = read holds of that owner
 * KEYS[2] zset R:  reader owner -> its lease deadline (server ms)
 * KEYS[3] zset W:  waiting writer -> heartbeat deadline (writer preference)
 * KEYS[4] fence, KEYS[5] channel.  Deadlines live inside the keys; the keys'
 * own TTL is the latest deadline, so abandoned state disappears by itself.
 */
#define RW_PRELUDE_LUA \
    NOW_LUA \
    "local H, R, W = KEYS[1], KEYS[2], KEYS[3]\n" \
    "local function purge()\n" \
    "  local wd = tonumber(redis.call('hget', H, 'wd') or '0')\n" \
    "  if wd > 0 and wd <= now then redis.call('hdel', H, 'w', 'wc', 'wd') end\n" \
    "  local dead = redis.call('zrangebyscore', R, '-inf', now)\n" \
    "  for _, o in ipairs(dead) do\n" \
    "    redis.call('hdel', H, 'rc:' .. o)\n" \
    "    redis.call('zrem', R, o)\n" \
    "  end\n" \
    "  redis.call('zremrangebyscore', W, '-inf', now)\n" \
    "end\n" \
    "local function fixttl()\n" \
    "  local m = tonumber(redis.call('hget', H, 'wd') or '0')\n" \
    "  for _, k in ipairs({R, W}) do\n" \
    "    local last = redis.call('zrange', k, -1, -1, 'WITHSCORES')\n" \
    "    if last[2] and tonumber(last[2]) > m then m = tonumber(last[2]) end\n" \
    "  end\n" \
    "  if m > now then\n" \
    "    for _, k in ipairs({H, R, W}) do\n" \
    "      if redis.call('exists', k) == 1 then redis.call('pexpire', k, m - now) end\n" \
    "    end\n" \
    "  else\n" \
    "    redis.call('del', H, R, W)\n" \
    "  end\n" \
    "end\n"

/* ARGV owner, side('r'|'w'), lease, writer_pref('1'|'0'), waiting('1'|'0'),
 * waiter_ttl */
static const char rwacq_lua[] =
    RW_PRELUDE_LUA
    "purge()\n"
    "local me, lease = ARGV[1], tonumber(ARGV[3])\n"
    "local w = redis.call('hget', H, 'w')\n"
    "if ARGV[2] == 'r' then\n"
    "  local mine = redis.call('hexists', H, 'rc:' .. me) == 1\n"
    "  local ww = ARGV[4] == '1' and redis.call('zcard', W) > 0\n"
    "  if (not w or w == me) and (mine or w == me or not ww) then\n"
    "    local n = redis.call('hincrby', H, 'rc:' .. me, 1)\n"
    "    local cur = tonumber(redis.call('zscore', R, me) or '0')\n"
    "    if now + lease > cur then redis.call('zadd', R, now + lease, me) end\n"
    "    fixttl()\n"
    "    if n == 1 then return {1, n, redis.call('incr', KEYS[4])} end\n"
    "    return {1, n, tonumber(redis.call('get', KEYS[4]) or '0')}\n"
    "  end\n"
    "  if w then return {0, tonumber(redis.call('hget', H, 'wd')) - now} end\n"
    "  return {0, -3}\n"
    "end\n"
    "if w == me then\n"
    "  local n = redis.call('hincrby', H, 'wc', 1)\n"
    "  redis.call('hset', H, 'wd', now + lease)\n"
    "  fixttl()\n"
    "  return {1, n, tonumber(redis.call('get', KEYS[4]) or '0')}\n"
    "end\n"
    "if (not w) and redis.call('zcard', R) == 0 then\n"
    "  redis.call('hset', H, 'w', me, 'wc', 1, 'wd', now + lease)\n"
    "  redis.call('zrem', W, me)\n"
    "  fixttl()\n"
    "  return {1, 1, redis.call('incr', KEYS[4])}\n"
    "end\n"
    "if ARGV[4] == '1' and ARGV[5] == '1' then\n"
    "  redis.call('zadd', W, now + tonumber(ARGV[6]), me)\n"
    "  fixttl()\n"
    "end\n"
    "if w then return {0, tonumber(redis.call('hget', H, 'wd')) - now} end\n"
    "local first = redis.call('zrange', R, 0, 0, 'WITHSCORES')\n"
    "if first[2] then return {0, tonumber(first[2]) - now} end\n"
    "return {0, -2}\n";

/* ARGV owner, side, mode, expected */
static const char rwrel_lua[] =
    RW_PRELUDE_LUA
    "purge()\n"
    "local me, e = ARGV[1], tonumber(ARGV[4])\n"
    "local c, f\n"
    "if ARGV[2] == 'r' then\n"
    "  f = 'rc:' .. me\n"
    "  c = tonumber(redis.call('hget', H, f))\n"
    "else\n"
    "  f = 'wc'\n"
    "  if redis.call('hget', H, 'w') == me then c = tonumber(redis.call('hget', H, 'wc')) end\n"
    "end\n"
    "if not c then return -1 end\n"
    "if ARGV[3] == 'r' and c == e - 1 then return -10 - c end\n"
    "if ARGV[3] == 'u' and c ~= e then return -3 end\n"
    "if c > 1 then\n"
    "  redis.call('hincrby', H, f, -1)\n"
    "  return c - 1\n"
    "end\n"
    "if ARGV[2] == 'r' then\n"
    "  redis.call('hdel', H, f)\n"
    "  redis.call('zrem', R, me)\n"
    "  if redis.call('zcard', R) == 0 then redis.call('publish', KEYS[5], '*') end\n"
    "else\n"
    "  redis.call('hdel', H, 'w', 'wc', 'wd')\n"
    "  redis.call('publish', KEYS[5], '*')\n"
    "end\n"
    "fixttl()\n"
    "return 0\n";

/* A waiting writer gives up.  ARGV owner */
static const char rwcancel_lua[] =
    RW_PRELUDE_LUA
    "purge()\n"
    "if redis.call('zrem', W, ARGV[1]) == 1 and redis.call('zcard', W) == 0 then\n"
    "  redis.call('publish', KEYS[5], '*')\n"
    "end\n"
    "fixttl()\n"
    "return 0\n";

/* ARGV side.  Returns 1 if something was released. */
static const char rwforce_lua[] =
    RW_PRELUDE_LUA
    "purge()\n"
    "local n = 0\n"
    "if ARGV[1] == 'r' then\n"
    "  for _, o in ipairs(redis.call('zrange', R, 0, -1)) do\n"
    "    redis.call('hdel', H, 'rc:' .. o)\n"
    "    n = 1\n"
    "  end\n"
    "  redis.call('del', R)\n"
    "else\n"
    "  n = redis.call('hdel', H, 'w', 'wc', 'wd')\n"
    "  if n > 0 then n = 1 end\n"
    "end\n"
    "if n == 1 then redis.call('publish', KEYS[5], '*') end\n"
    "fixttl()\n"
    "return n\n";

/* RW queries.  ARGV owner, side.  Returns {locked(0/1), my holds, pttl} */
static const char rwinfo_lua[] =
    RW_PRELUDE_LUA
    "purge()\n"
    "local locked, mine, d = 0, 0, -2\n"
    "if ARGV[2] == 'r' then\n"
    "  if redis.call('zcard', R) > 0 then\n"
    "    locked = 1\n"
    "    local last = redis.call('zrange', R, -1, -1, 'WITHSCORES')\n"
    "    d = tonumber(last[2]) - now\n"
    "  end\n"
    "  mine = tonumber(redis.call('hget', H, 'rc:' .. ARGV[1]) or '0')\n"
    "else\n"
    "  local w = redis.call('hget', H, 'w')\n"
    "  if w then\n"
    "    locked = 1\n"
    "    d = tonumber(redis.call('hget', H, 'wd')) - now\n"
    "    if w == ARGV[1] then mine = tonumber(redis.call('hget', H, 'wc')) end\n"
    "  end\n"
    "end\n"
    "return {locked, mine, d}\n";

/* ---- watchdog ------------------------------------------------------------ */
/*
 * One call renews a batch of locks.  Entry i uses KEYS[3i-2..3i] and
 * ARGV[3i-2..3i] = type, owner, lease; returns an array of 1 (renewed) /
 * 0 (not held by that owner any more).  Types: 'h' hash lock (reentrant,
 * fair), 's' simple lock, 'r'/'w' read/write side (keys H, R, W).
 */
static const char renew_lua[] =
    NOW_LUA
    "local res = {}\n"
    "for i = 1, #ARGV / 3 do\n"
    "  local ty, o, lease = ARGV[3*i-2], ARGV[3*i-1], tonumber(ARGV[3*i])\n"
    "  local H, R, W = KEYS[3*i-2], KEYS[3*i-1], KEYS[3*i]\n"
    "  local ok = 0\n"
    "  if ty == 'h' then\n"
    "    if redis.call('hexists', H, o) == 1 then redis.call('pexpire', H, lease); ok = 1 end\n"
    "  elseif ty == 's' then\n"
    "    if redis.call('get', H) == o then redis.call('pexpire', H, lease); ok = 1 end\n"
    "  else\n"
    "    if ty == 'r' then\n"
    "      local d = tonumber(redis.call('zscore', R, o) or '0')\n"
    "      if d > now and redis.call('hexists', H, 'rc:' .. o) == 1 then\n"
    "        if now + lease > d then redis.call('zadd', R, now + lease, o) end\n"
    "        ok = 1\n"
    "      end\n"
    "    else\n"
    "      local d = tonumber(redis.call('hget', H, 'wd') or '0')\n"
    "      if d > now and redis.call('hget', H, 'w') == o then\n"
    "        if now + lease > d then redis.call('hset', H, 'wd', now + lease) end\n"
    "        ok = 1\n"
    "      end\n"
    "    end\n"
    "    if ok == 1 then\n"
    "      local m = tonumber(redis.call('hget', H, 'wd') or '0')\n"
    "      for _, k in ipairs({R, W}) do\n"
    "        local last = redis.call('zrange', k, -1, -1, 'WITHSCORES')\n"
    "        if last[2] and tonumber(last[2]) > m then m = tonumber(last[2]) end\n"
    "      end\n"
    "      for _, k in ipairs({H, R, W}) do\n"
    "        if redis.call('exists', k) == 1 then redis.call('pexpire', k, m - now) end\n"
    "      end\n"
    "    end\n"
    "  end\n"
    "  res[i] = ok\n"
    "end\n"
    "return res\n";

/* ---- fencing check (public) --------------------------------------------- */

const char rlock_fence_lua[] =
    "local max = tonumber(redis.call('get', KEYS[2]) or '0')\n"
    "local t = tonumber(ARGV[1])\n"
    "if t < max then return 0 end\n"
    "redis.call('set', KEYS[2], ARGV[1])\n"
    "redis.call('set', KEYS[1], ARGV[2])\n"
    "return 1\n";

const char *const rlock__scripts[RLOCK__NSCRIPTS] = {
    [RLOCK__S_ACQ] = acq_lua,
    [RLOCK__S_REL] = rel_lua,
    [RLOCK__S_FORCE] = force_lua,
    [RLOCK__S_SACQ_FENCED] = sacq_fenced_lua,
    [RLOCK__S_SREL] = srel_lua,
    [RLOCK__S_CAD] = cad_lua,
    [RLOCK__S_FACQ] = facq_lua,
    [RLOCK__S_FREL] = frel_lua,
    [RLOCK__S_FCANCEL] = fcancel_lua,
    [RLOCK__S_RWACQ] = rwacq_lua,
    [RLOCK__S_RWREL] = rwrel_lua,
    [RLOCK__S_RWCANCEL] = rwcancel_lua,
    [RLOCK__S_RWFORCE] = rwforce_lua,
    [RLOCK__S_RWINFO] = rwinfo_lua,
    [RLOCK__S_RENEW] = renew_lua,
    [RLOCK__S_FENCE_SET] = rlock_fence_lua,
};

-- life.lua: an admitted order's lifecycle decisions, atomic inside Redis, on the slot of
-- the buyer's stock bucket (the keys the order was admitted under; docs/lifecycle.md).
--
-- KEYS[1] seckill:voucher:{tag}  hash stock, ep, returned (units cancelled orders gave back),
--                                paid and timedout (orders paid / timed out, for the board),
--                                freed (buyers a cancel or timeout let buy again)
-- KEYS[2] seckill:order:{tag}    hash userId -> orderId (admit.lua's buyers)
-- KEYS[3] seckill:ostate:{tag}   hash orderId -> "<state> <ts> <userId>" (the state
--                                machine's memory: an order without a field is unpaid,
--                                status 1), and "<orderId>/<paymentId>" -> a payment's answer
-- KEYS[4] seckill:stream:{tag}   the bucket's order stream: the event goes behind the
--                                order's own entry, so the writer applies it after the insert
-- KEYS[5] expire and board: seckill:paysweep:{tag}, the id of the last stream entry
--         whose orders the payment-deadline sweep has expired (src/writer/writer_life.c);
--         pay: seckill:refunds:{tag}, the refund outbox (a refund decided goes there, in
--         this same call; the order writer sends it: src/writer/writer_refund.c)
-- ARGV[1] op: 'cancel' (the buyer), 'pay' (a payment notice, signature and amount checked
--         by the caller), 'expire' (payment deadlines passed) or 'board' (read only: the
--         sale board's figures, src/api/api_board.c); 'cancel-free' and 'expire-free' are
--         cancel and expire that also free the buyer (--cancel-frees-buyer): the buyer
--         leaves the buyers hash (admit.lua lets them buy again), the hash's `freed`
--         counts them, and the event entry carries `free 1` (the writer moves the row
--         aside, freeing SQL's one-order-per-user key too)
-- cancel: ARGV[2] orderId ARGV[3] userId (the order's, as the caller found it)
-- pay:    the same and ARGV[4] the provider's paymentId, ARGV[5] its amount (fen)
-- expire: ARGV[2] the stream entry id the sweep reached ('' for none: the cursor stays),
--         then orderId userId pairs, any number (the orders of that page's entries)
-- board:  ARGV[2] the end of the next minute's deadlines, as a stream id bound: the
--         admissions up to (now + 60 s - timeout) in ms, '' when no timeout runs; ARGV[3]
--         at most that many orders looked at (the figure is then a lower bound)
--
-- State values: c cancelled by the buyer, t timed out, p paid, r cancelled or timed out and
-- then paid (the payment refunded). A payment's own answer is kept under field
-- "<orderId>/<paymentId>" (0 taken, 2 refunded), so the same notice again gets the same
-- answer and changes nothing.
--
-- cancel returns 0 done now (unit returned, event queued), 1 already cancelled or timed
-- out (nothing returned twice), 2 paid (refused), 3 not this user's order, 5 the voucher
-- has no stock hash in this Redis (nothing changed).
-- pay returns 0 taken now (event p), 2 to refund now (the order was cancelled or timed out:
-- event r the first time; or it was paid by another payment), 10 / 12 the same payment
-- before (taken / refunded: nothing to do again), 3, 5 as above.
-- expire decides each pair as a cancel would (an order paid, cancelled or timed out before
-- is left as it is) and returns {orders timed out now, the cursor after it} -- the cursor
-- only moves forward, so a sweeper behind another one learns where that one is.
-- board returns {paid, timedout, returned, due, capped, freed}: the hash's counters, and the
-- orders past the sweep's cursor admitted up to the bound that are still unpaid (the
-- returns due by then; capped 1 when the look stopped at ARGV[3] orders).
--
-- The event entry: field ev = "<c|p|r> <orderId> <userId> <ts> <ep>" (src/sale/sentry.h);
-- expire writes one entry for all the orders the call timed out (none when it timed out
-- none): field evs = "t <ts> <ep> <orderId> <userId> [<orderId> <userId> ...]";
-- a payment's event also has field pay = "<paymentId> <amount> <0 taken | 2 refunded>",
-- for the writer's payment row (tb_voucher_payment). Every payment answered the first time
-- has one: p (taken; or refunded, the order paid before), r (refunded: the order was
-- cancelled or timed out; or refunded again).
-- A refund decided also goes to KEYS[5]: fields order, payment, amount, user.
local op = ARGV[1]
local free = op == 'cancel-free' or op == 'expire-free'
if free then op = string.sub(op, 1, 6) end
if op == 'board' and #KEYS == 5 and #ARGV == 3 then
  local c = redis.call('HMGET', KEYS[1], 'paid', 'timedout', 'returned', 'freed')
  local due, capped, cap = 0, 0, tonumber(ARGV[3]) or 0
  if ARGV[2] ~= '' then
    local from = redis.call('GET', KEYS[5])
    from = from and ('(' .. from) or '-'
    local seen = 0
    for _, e in ipairs(redis.call('XRANGE', KEYS[4], from, ARGV[2], 'COUNT', cap)) do
      local f = e[2]
      for i = 1, #f - 1, 2 do
        if f[i] == 'os' then
          local n = 0
          for oid in string.gmatch(f[i + 1], '%d+') do
            n = n + 1
            -- ts ep, then orderId userId pairs: the orders are the odd ones from the third
            if n >= 3 and n % 2 == 1 then
              seen = seen + 1
              if redis.call('HEXISTS', KEYS[3], oid) == 0 then due = due + 1 end
            end
          end
        end
      end
      if seen >= cap then capped = 1; break end
    end
  end
  return {tonumber(c[1] or 0), tonumber(c[2] or 0), tonumber(c[3] or 0), due, capped,
          tonumber(c[4] or 0)}
end
if (op == 'expire' and (#KEYS ~= 5 or #ARGV % 2 ~= 0)) or
   (op == 'cancel' and (#KEYS ~= 4 or #ARGV ~= 3)) or
   (op == 'pay' and (#KEYS ~= 5 or #ARGV ~= 5)) or
   (op ~= 'cancel' and op ~= 'expire' and op ~= 'pay') then
  return redis.error_reply('ERR life.lua: bad arguments (KEYS voucher buyers ostate stream ' ..
                           '[paysweep|refunds], ARGV op orderId userId [paymentId amount] | ' ..
                           'expire cursor orderId userId ...)')
end

-- The event entry; pay: its payment field; a cancel or timeout that frees the buyer also
-- carries `free 1` (a pay event never frees: in practice the two are exclusive).
local function event(kind, oid, uid, ts, ep, pay)
  local ev = kind .. ' ' .. oid .. ' ' .. uid .. ' ' .. ts .. ' ' .. (ep or '0')
  local f = {'XADD', KEYS[4], '*', 'ev', ev}
  if free and (kind == 'c' or kind == 't') then
    f[#f + 1] = 'free'; f[#f + 1] = '1'
  end
  if pay then
    f[#f + 1] = 'pay'; f[#f + 1] = pay
  end
  redis.call(unpack(f))
end

-- expire's events: one evs entry per call (src/sale/sentry.h), not one ev entry per order
-- -- an XADD, its AOF record, and the writer's read, pending entry and XACK per call. pairs:
-- the orders timed out, orderId userId one after the other; at most SENTRY_MAX_EVENTS
-- (1024) orders an entry.
local function events(pairs, ts, ep)
  for i = 1, #pairs, 2 * 1024 do
    local f = {'XADD', KEYS[4], '*', 'evs', 't ' .. ts .. ' ' .. (ep or '0') .. ' ' ..
               table.concat(pairs, ' ', i, math.min(#pairs, i + 2 * 1024 - 1))}
    if free then f[#f + 1] = 'free'; f[#f + 1] = '1' end
    redis.call(unpack(f))
  end
end

-- cancel or expire (kind c or t) of order oid of user uid; v: the voucher's stock and ep
-- (HMGET), ts: the decision's second. 0 decided now (the caller gives the unit back), else
-- the answer as above.
local function stop(kind, oid, uid, v, ts)
  local st = redis.call('HGET', KEYS[3], oid)
  if st then
    local _, _, owner = string.match(st, '^(%a) (%d+) (%d+)$')
    if owner ~= uid then return 3 end
    if string.sub(st, 1, 1) == 'p' then return 2 end
    return 1
  end
  if not v[1] then return 5 end
  -- an order still unpaid: its buyer hash names it (an order a rebuild from SQL brought
  -- back has its buyer there too)
  if redis.call('HGET', KEYS[2], uid) ~= oid then return 3 end
  redis.call('HSET', KEYS[3], oid, kind .. ' ' .. ts .. ' ' .. uid)
  event(kind, oid, uid, ts, v[2])
  if free then
    redis.call('HDEL', KEYS[2], uid)
    redis.call('HINCRBY', KEYS[1], 'freed', 1)
  end
  return 0
end

-- n units back in the bucket's stock
local function give_back(n)
  if n > 0 then
    redis.call('HINCRBY', KEYS[1], 'stock', n)
    redis.call('HINCRBY', KEYS[1], 'returned', n)
  end
end

-- "<ms>-<seq>" as two numbers, for the cursor's comparison
local function idpair(id)
  local ms, seq = string.match(id or '', '^(%d+)-(%d+)$')
  return tonumber(ms or -1), tonumber(seq or -1)
end

local v = redis.call('HMGET', KEYS[1], 'stock', 'ep')
local ts = redis.call('TIME')[1]
-- expire's orders decided together: one HMGET of their states, one of their buyers, one
-- HSET of the new states (and for expire-free one HDEL), not four commands an order --
-- each redis.call costs a script about a microsecond beyond its command, and a wave of
-- deadlines runs 32 orders a call. Each pair decided as stop('t', ...) would, in order
-- (an order named twice is decided once). Returns how many were timed out now.
local function expire_all(v, ts)
  if not v[1] or #ARGV < 4 then return 0 end
  local oids, uids = {}, {}
  for i = 3, #ARGV, 2 do
    oids[#oids + 1] = ARGV[i]
    uids[#uids + 1] = ARGV[i + 1]
  end
  local sts = redis.call('HMGET', KEYS[3], unpack(oids))
  local bys = redis.call('HMGET', KEYS[2], unpack(uids))
  local set, gone, done, seen, n = {}, {}, {}, {}, 0
  for i = 1, #oids do
    local oid, uid = oids[i], uids[i]
    if not sts[i] and bys[i] == oid and not seen[oid] then
      seen[oid] = true
      n = n + 1
      set[#set + 1] = oid
      set[#set + 1] = 't ' .. ts .. ' ' .. uid
      gone[n] = uid
      done[2 * n - 1] = oid
      done[2 * n] = uid
    end
  end
  if n > 0 then
    events(done, ts, v[2])
    redis.call('HSET', KEYS[3], unpack(set))
    if free then
      redis.call('HDEL', KEYS[2], unpack(gone))
      redis.call('HINCRBY', KEYS[1], 'freed', n)
    end
  end
  return n
end

if op == 'expire' then
  local n = expire_all(v, ts)
  give_back(n)
  if n > 0 then redis.call('HINCRBY', KEYS[1], 'timedout', n) end
  local cur = redis.call('GET', KEYS[5])
  if ARGV[2] ~= '' then
    local am, as = idpair(ARGV[2])
    local cm, cs = idpair(cur)
    if am > cm or (am == cm and as > cs) then
      redis.call('SET', KEYS[5], ARGV[2])
      cur = ARGV[2]
    end
  end
  return {n, cur or ''}
end

local oid, uid = ARGV[2], ARGV[3]
if op == 'cancel' then
  local rc = stop('c', oid, uid, v, ts)
  if rc == 0 then give_back(1) end
  return rc
end

-- pay
local fp = oid .. '/' .. ARGV[4]
local prev = redis.call('HGET', KEYS[3], fp)
if prev then return 10 + tonumber(prev) end
local amt = ARGV[5]
local st = redis.call('HGET', KEYS[3], oid)
if st then
  local kind, _, owner = string.match(st, '^(%a) (%d+) (%d+)$')
  if owner ~= uid then return 3 end
  -- a payment for an order that cannot take it: refunded (the order moves from c / t to
  -- r; a paid one stays paid, an r stays r)
  local ek = kind == 'p' and 'p' or 'r'
  if kind == 'c' or kind == 't' then
    redis.call('HSET', KEYS[3], oid, 'r ' .. ts .. ' ' .. uid)
  end
  redis.call('HSET', KEYS[3], fp, 2)
  event(ek, oid, uid, ts, v[2], ARGV[4] .. ' ' .. amt .. ' 2')
  redis.call('XADD', KEYS[5], '*', 'order', oid, 'payment', ARGV[4], 'amount', amt, 'user', uid)
  return 2
end
if not v[1] then return 5 end
if redis.call('HGET', KEYS[2], uid) ~= oid then return 3 end
redis.call('HSET', KEYS[3], oid, 'p ' .. ts .. ' ' .. uid, fp, 0)
redis.call('HINCRBY', KEYS[1], 'paid', 1)
event('p', oid, uid, ts, v[2], ARGV[4] .. ' ' .. amt .. ' 0')
return 0

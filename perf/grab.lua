-- grab.lua: wrk script for POST /voucher-order/seckill/<id>, a distinct user per request.
-- Tokens are seeded into Redis by perf/run.sh as login:token:<32 hex of n>, n = 1..USERS.
-- Env: VOUCHER (id), USERS (number of seeded tokens). Each wrk thread walks its own
-- residue class of n, so no two requests share a user until USERS is used up.
local counter = 0
local threads = {}
local voucher = os.getenv("VOUCHER") or "10"
local users = tonumber(os.getenv("USERS") or "100000")
local nthreads = tonumber(os.getenv("WRK_THREADS") or "2")
local tid = 0

function setup(thread)
   thread:set("tid", #threads)
   table.insert(threads, thread)
end

function init(args)
   tid = tonumber(wrk.thread:get("tid")) or 0
end

local path = "/voucher-order/seckill/" .. voucher
local headers = {}

function request()
   local n = (counter * nthreads + tid) % users + 1
   counter = counter + 1
   headers["authorization"] = string.format("%032x", n)
   return wrk.format("POST", path, headers)
end

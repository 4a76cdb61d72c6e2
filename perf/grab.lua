-- grab.lua: wrk script for POST /voucher-order/seckill/<id>, a distinct user per request.
-- Tokens come from `seckill tokens` (signed with the service's key, hashes in Redis), one
-- "<token> <user id>" line each, in the file named by TOKENS. Env: VOUCHER (id), TOKENS,
-- WRK_THREADS. Each wrk thread walks its own residue class of the list, so no two
-- requests share a user until the list is used up.
local counter = 0
local threads = {}
local voucher = os.getenv("VOUCHER") or "10"
local nthreads = tonumber(os.getenv("WRK_THREADS") or "2")
local tid = 0
local tokens = {}

function setup(thread)
   thread:set("tid", #threads)
   table.insert(threads, thread)
end

function init(args)
   tid = tonumber(wrk.thread:get("tid")) or 0
   for line in io.lines(os.getenv("TOKENS")) do
      tokens[#tokens + 1] = line:sub(1, 32)
   end
end

local path = "/voucher-order/seckill/" .. voucher
local headers = {}

function request()
   local n = (counter * nthreads + tid) % #tokens + 1
   counter = counter + 1
   headers["authorization"] = tokens[n]
   return wrk.format("POST", path, headers)
end

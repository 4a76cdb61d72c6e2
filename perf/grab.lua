-- grab.lua: wrk script for POST /voucher-order/seckill/<id>, a distinct user per request.
-- Tokens come from `seckill tokens` (signed with the service's key, hashes in Redis), one
-- "<token> <user id>" line each, in the file named by TOKENS; a third field, if the lines
-- have one (perf/room_client.py passes), is sent as the x-seckill-pass header. Env: VOUCHER (id), TOKENS,
-- WRK_THREADS. Each wrk thread takes its own residue class of the list, so no two
-- requests share a user until the list is used up. The requests are formatted once, in
-- init: request() only hands the next one out, so wrk's own CPU per request (it shares
-- the cores with the server) stays close to a plain `wrk URL` run's, as for nginx.
local threads = {}
local voucher = os.getenv("VOUCHER") or "10"
local nthreads = tonumber(os.getenv("WRK_THREADS") or "2")
local reqs = {}
local nreqs = 0
local next_req = 0

function setup(thread)
   thread:set("tid", #threads)
   table.insert(threads, thread)
end

function init(args)
   local tid = tonumber(wrk.thread:get("tid")) or 0
   -- wrk.format once, around a marker; each request is then two concatenations
   local first = io.lines(os.getenv("TOKENS"))() or ""
   local with_pass = first:match("^%S+ %S+ %S+") ~= nil
   local tmpl = wrk.format("POST", "/voucher-order/seckill/" .. voucher,
                           { authorization = "@@TOKEN@@",
                             ["x-seckill-pass"] = with_pass and "@@PASS@@" or nil })
   local pre, post = tmpl:match("^(.-)@@TOKEN@@(.*)$")
   local i = 0
   for line in io.lines(os.getenv("TOKENS")) do
      if i % nthreads == tid then
         nreqs = nreqs + 1
         reqs[nreqs] = pre .. line:sub(1, 32) .. post
         if with_pass then   -- the headers' order is wrk's: the pass may come before the token
            local pass = line:match("^%S+ %S+ (%S+)")
            reqs[nreqs] = reqs[nreqs]:gsub("@@PASS@@", function() return pass end, 1)
         end
      end
      i = i + 1
   end
   if nreqs == 0 then  -- fewer tokens than threads: share the first one
      local line = io.lines(os.getenv("TOKENS"))()
      nreqs = 1
      reqs[1] = pre .. line:sub(1, 32) .. post
   end
end

function request()
   next_req = next_req % nreqs + 1
   return reqs[next_req]
end

/* writer_guard.c -- the replica promise of --redis-wait-replicas N, kept by the master
 * itself (writer_int.h), and the repair of a group's stale read counter after a failover.
 *
 * An admission must not take stock on a master that cannot hand it to N replicas: WAIT
 * after the fact only tells the buyer "retry", while the unit and the buyer stay taken in
 * an entry the writer may never persist (its batch WAITs too). Redis refuses writes by
 * itself with min-replicas-to-write N / min-replicas-max-lag GUARD_MAX_LAG_S: admit.lua's
 * first write (HSETNX or HSET, before XADD and the stock) fails with NOREPLICAS, so the
 * script writes nothing, and the worker answers 503 RETRY (admission.c). CONFIG SET is
 * per node and not replicated, so each (sub-)writer sets it on its master on every
 * connection and on every replica that master lists, when it comes online and every
 * GUARD_REASSERT_MS (a restart forgets it), so a promoted replica already has it.
 *
 * Every INFO_EVERY_MS the writer counts its master's in-sync replicas (INFO replication:
 * online, lag <= GUARD_MAX_LAG_S): short of N, it logs it once (on change), publishes it
 * (seckill_redis_masters_short_of_replicas and the short slots the board reads) and reads
 * nothing -- XREADGROUP and XACK are writes Redis refuses there too, and a batch could not
 * be persisted anyway. When a replica attaches, the backlog is written as usual.
 *
 * Redis 7.0 replicas do not carry a group's entries-read counter: XREADGROUP reaches them
 * as XCLAIM ... LASTID, which moves last-delivered-id but not entries-read, so a replica
 * loaded from a snapshot mid-sale keeps the snapshot's counter. Promoted, it reports g1's
 * lag as the entries added since that snapshot, for ever, though the group has read every
 * entry. writer_guard_fix_lag sets the counter again, in one script (no XADD in between),
 * only when last-delivered-id is the stream's last id. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <hiredis/hiredis.h>

#include "core/clock.h"
#include "core/key.h"
#include "core/log.h"
#include "redis/rcluster.h"
#include "redis/rconn.h"
#include "server/events.h"
#include "writer/writer_int.h"

#define GUARD_MAX_LAG_S 2   /* min-replicas-max-lag: a replica acks every second */
#define GUARD_REASSERT_MS 10000   /* the promise sent to every replica again */

/* The group's counter again when it has read the whole stream (see the header). */
static const char FIX_LAG_LUA[] =
    "local function f(a, k) for i = 1, #a, 2 do if a[i] == k then return a[i + 1] end end end\n"
    "local s = redis.call('XINFO', 'STREAM', KEYS[1])\n"
    "for _, g in ipairs(redis.call('XINFO', 'GROUPS', KEYS[1])) do\n"
    "  if f(g, 'name') == ARGV[1] then\n"
    "    local last = f(s, 'last-generated-id')\n"
    "    if f(g, 'last-delivered-id') == last and f(g, 'lag') ~= 0 then\n"
    "      redis.call('XGROUP', 'SETID', KEYS[1], ARGV[1], last, 'ENTRIESREAD',\n"
    "                 f(s, 'entries-added'))\n"
    "      return 1\n"
    "    end\n"
    "  end\n"
    "end\n"
    "return 0\n";

/* CONFIG SET of the promise on a connection of our own (not the writer's: its replies
 * live in its arena); 0, or -1 with why. */
static int set_promise(redisContext *c, int n, char *why, size_t len)
{
    redisReply *r = rconn_cmdf(c, why, len, "CONFIG SET min-replicas-to-write %d "
                               "min-replicas-max-lag %d", n, GUARD_MAX_LAG_S);
    freeReplyObject(r);
    return r ? 0 : -1;
}

/* The same on the writer's connection (its reply is the arena's). 0, or -1 with why;
 * a lost connection is dropped (writer_redis_fail). */
static int set_promise_here(writer_t *wr, char *why, size_t len)
{
    char n[16], lag[16];
    snprintf(n, sizeof n, "%d", wr->wait_replicas);
    snprintf(lag, sizeof lag, "%d", GUARD_MAX_LAG_S);
    size_t k = 0;
    writer_args(wr, &k, "CONFIG");
    writer_args(wr, &k, "SET");
    writer_args(wr, &k, "min-replicas-to-write");
    writer_args(wr, &k, n);
    writer_args(wr, &k, "min-replicas-max-lag");
    writer_args(wr, &k, lag);
    redisReply *r = writer_cmd(wr, k);
    if (!r) {
        snprintf(why, len, "no reply");
        writer_redis_fail(wr, "CONFIG SET", NULL);
        return -1;
    }
    if (r->type == REDIS_REPLY_ERROR) {
        snprintf(why, len, "%.*s", (int)(r->len > 200 ? 200 : r->len), r->str);
        return -1;
    }
    return 0;
}

/* Whether the replica (ip, port) is in list[0..n). */
static int rep_known(const writer_t *wr, const char *ip, int port)
{
    for (int i = 0; i < wr->guard_nrep; i++)
        if (wr->guard_rep[i].port == port && strcmp(wr->guard_rep[i].host, ip) == 0)
            return 1;
    return 0;
}

/* The promise on a replica the master lists (ip, port), on a connection of its own. */
static void set_on_replica(writer_t *wr, const char *ip, int port)
{
    url_redis_t a = wr->addr;
    a.cluster = 0;
    a.nseeds = 0;
    a.unix_path[0] = '\0';
    snprintf(a.host, sizeof a.host, "%s", ip);
    a.port = port;
    char why[256];
    redisContext *c = rconn_open(&a, wr->redis_timeout_ms, why, sizeof why);
    int rc = c ? set_promise(c, wr->wait_replicas, why, sizeof why) : -1;
    rconn_close(c);
    if (rc != 0)
        log_warn("writer: cannot set min-replicas-to-write on replica %s:%d (%s): promoted, "
                 "it sells without the promise until a writer connects to it", ip, port, why);
}

/* INFO replication's in-sync replicas ("slaveN:ip=..,port=..,state=online,offset=..,
 * lag=.."); -1 if the reply is not that of a master. A replica that is online now and
 * was not at the last pass (new, or back from a restart, which forgets CONFIG SET) gets
 * the promise; and every one again each GUARD_REASSERT_MS, for a restart too quick to
 * be seen offline. Tried once each time, whatever the outcome (an unreachable replica
 * costs one connect and one log line, not one each second). */
static int count_in_sync(writer_t *wr, const char *info)
{
    if (!strstr(info, "role:master"))
        return -1;
    uint64_t now = clock_mono_ms();
    if (now >= wr->guard_reassert_at) {
        wr->guard_reassert_at = now + GUARD_REASSERT_MS;
        wr->guard_nrep = 0;
    }
    int good = 0, nkeep = 0;
    struct { char host[64]; int port; } keep[GUARD_REPLICAS_MAX];
    for (const char *p = strstr(info, "\nslave"); p; p = strstr(p + 1, "\nslave")) {
        char ip[64], state[32];
        int port, lag;
        long long off;
        if (sscanf(p, "\nslave%*d:ip=%63[^,],port=%d,state=%31[^,],offset=%lld,lag=%d", ip,
                   &port, state, &off, &lag) != 5 || strcmp(state, "online") != 0)
            continue;
        if (!rep_known(wr, ip, port))
            set_on_replica(wr, ip, port);
        if (nkeep < GUARD_REPLICAS_MAX) {
            snprintf(keep[nkeep].host, sizeof keep[0].host, "%s", ip);
            keep[nkeep++].port = port;
        }
        if (lag <= GUARD_MAX_LAG_S)
            good++;
    }
    memcpy(wr->guard_rep, keep, (size_t)nkeep * sizeof keep[0]);
    wr->guard_nrep = nkeep;
    return good;
}

/* The short master's slots into the bitmap the board reads (a single Redis: every slot). */
static void publish_slots(writer_t *wr, int is_short)
{
    metrics_t *m = wr->m;
    if (!wr->node_mode) {
        for (unsigned i = 0; i < RCL_SLOTS / 64; i++)
            atomic_store(&m->short_slots[i], is_short ? ~UINT64_C(0) : 0);
        return;
    }
    /* The slot map: while short, the streams' refresh (which keeps it) does not run. */
    char why[256];
    if (!wr->rcs)
        wr->rcs = rcl_sync_open(&wr->cluster_addr, wr->redis_timeout_ms, why, sizeof why);
    else if (is_short)
        (void)rcl_sync_refresh(wr->rcs, why, sizeof why);   /* failed: the old map */
    const rcluster_map_t *map = wr->rcs ? rcl_sync_map(wr->rcs) : NULL;
    if (!map)
        return;
    for (unsigned s = 0; s < RCL_SLOTS; s++) {
        int o = rcluster_map_owner(map, s);
        if (o < 0 || map->nodes[o].port != wr->addr.port ||
            strcmp(map->nodes[o].host, wr->addr.host) != 0)
            continue;
        uint64_t bit = UINT64_C(1) << (s % 64);
        if (is_short)
            atomic_fetch_or(&m->short_slots[s / 64], bit);
        else
            atomic_fetch_and(&m->short_slots[s / 64], ~bit);
    }
}

void writer_guard_reset(writer_t *wr)
{
    wr->guard_set = 0;
    wr->guard_at = 0;
    wr->guard_nrep = 0;
    wr->guard_reassert_at = 0;
}

int writer_guard_run(writer_t *wr)
{
    if (wr->wait_replicas <= 0 || !wr->rc)
        return 0;
    uint64_t now = clock_mono_ms();
    if (now < wr->guard_at)
        return wr->guard_short;
    wr->guard_at = now + GUARD_EVERY_MS;
    char why[256] = "";
    if (!wr->guard_set) {
        wr->guard_set = 1;
        if (set_promise_here(wr, why, sizeof why) != 0 && !wr->rc)
            return -1;
        if (why[0] && !wr->guard_warned) {
            wr->guard_warned = 1;
            log_warn("writer: cannot set min-replicas-to-write %d on %s:%d (%s): set it "
                     "there yourself, or admissions on it take stock that a failover can "
                     "strand (docs/redis-cluster.md)", wr->wait_replicas, wr->addr.host,
                     wr->addr.port, why);
        }
    }
    size_t k = 0;
    writer_args(wr, &k, "INFO");
    writer_args(wr, &k, "replication");
    redisReply *r = writer_cmd(wr, k);
    if (!r) {
        writer_redis_fail(wr, "INFO replication", NULL);
        return -1;
    }
    int good = r->type == REDIS_REPLY_STRING ? count_in_sync(wr, r->str) : -1;
    if (good < 0)
        return wr->guard_short;
    int is_short = good < wr->wait_replicas;
    if (is_short != wr->guard_short || !wr->guard_known) {
        if (is_short) {
            log_warn("writer: master %s:%d has %d of %d in-sync replicas: its vouchers are "
                     "not sellable (admissions refused before they take stock) and its "
                     "unreplicated orders wait, until a replica attaches", wr->addr.host,
                     wr->addr.port, good, wr->wait_replicas);
            events_add(EV_REPLICAS_LOW, 0, "master %s:%d has %d of %d promised in-sync "
                       "replicas: its vouchers are not sellable", wr->addr.host,
                       wr->addr.port, good, wr->wait_replicas);
        } else if (wr->guard_known) {
            log_info("writer: master %s:%d has %d in-sync replicas again: selling and "
                     "writing", wr->addr.host, wr->addr.port, good);
            events_add(EV_REPLICAS_LOW, 0, "master %s:%d has %d in-sync replicas again: "
                       "selling", wr->addr.host, wr->addr.port, good);
        }
        wr->guard_short = is_short;
        wr->guard_known = 1;
    }
    atomic_store(&wr->node_short, is_short);
    publish_slots(wr, is_short);
    if (!wr->node_mode)
        atomic_store(&wr->m->masters_short, is_short);
    return is_short;
}

void writer_guard_fix_lag(writer_t *wr, size_t si)
{
    size_t k = 0;
    writer_args(wr, &k, "EVAL");
    writer_args(wr, &k, FIX_LAG_LUA);
    writer_args(wr, &k, "1");
    writer_args(wr, &k, wr->streams[si].key);
    writer_args(wr, &k, KEY_GROUP);
    redisReply *r = writer_cmd(wr, k);
    if (!r) {
        writer_redis_fail(wr, "EVAL (group counter)", NULL);
        return;
    }
    if (r->type == REDIS_REPLY_INTEGER && r->integer == 1)
        log_info("writer: %s: g1's lag was a stale counter (every entry delivered); set "
                 "again", wr->streams[si].key);
}

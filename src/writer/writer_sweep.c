/* writer_sweep.c -- the order writer's drained set (writer_int.h): ended streams it no
 * longer reads, and the checks that keep that safe.
 *
 * seckill:streams is never trimmed: a service that sells every day lists thousands of
 * streams. A drained one (in {seckill:streams}:drained: its sale ended by its Redis's clock
 * + DRAIN_MARGIN_S and g1 had no lag and nothing pending, so every order it admitted is in
 * SQL and none can be admitted any more) is named by none of the writer's reads, claims
 * and XINFO passes: the per-poll work follows the live streams. The metrics pass marks
 * them (writer_sweep_marks). What keeps that safe:
 *   - the set lost (Redis data loss, its master flushed, a DEL): SCARD each metrics pass
 *     is below the number of streams we skip -> SMISMEMBER again, a stream no longer in
 *     it is read again (pending pass included) and re-marked as before; after a reconnect
 *     every stream is looked up again;
 *   - the sweep (every --writer-drain-sweep-ms, writer_sweep_run): up to SWEEP_MAX drained
 *     streams per sweep, round-robin, XINFO GROUPS in one pipeline and one SMISMEMBER: a
 *     stream showing lag or pending (an operator's XADD, a bug) or whose g1 is gone is
 *     taken out of the set (SREM: lookups ask it again), counted (writer_undrained) and
 *     logged as an error, and read again; one an operator took out of the set is read
 *     again and re-marked. A full round over N drained streams takes N / SWEEP_MAX sweeps;
 *   - stream_pending and stream_lag sum the live streams only (a drained one had 0 of
 *     each when marked; the sweep is what watches it since); writer_streams_live and
 *     writer_streams_drained count the two kinds.
 * Queue and lab modes never mark nor skip (their orders are not in the streams alone). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <hiredis/hiredis.h>

#include "core/clock.h"
#include "core/key.h"
#include "core/log.h"
#include "core/xmem.h"
#include "writer/writer_int.h"

/* The drained set (orders.h): a stream is marked once its sale ended this long ago by its
 * own Redis's clock -- the clock admit.lua judges the window by, so the margin only covers
 * that clock stepping back or a failover to a node whose clock lags. */
#define DRAIN_MARGIN_S 5
#define VOUCHER_RELOOK_MS 30000   /* drain check: next SQL look-up of a voucher not found */
#define SWEEP_MAX 64              /* drained streams re-checked per sweep (writer_sweep_run) */

/* A command on the drained set: on one Redis through our connection (its reply lives in
 * the arena), on a cluster through the cluster client (the set lives in seckill:streams'
 * slot; the caller frees the reply with drained_done). NULL: no reply (why says). */
static redisReply *drained_cmd(writer_t *wr, int argc, const char **argv, const size_t *lens,
                               char *why, size_t whylen)
{
    if (wr->node_mode)
        return wr->rcs ? rcl_sync_command(wr->rcs, KEY_DRAINED, strlen(KEY_DRAINED), argc, argv,
                                     lens, why, whylen)
                       : NULL;
    size_t n = 0;
    for (int k = 0; k < argc; k++)
        writer_arg(wr, &n, argv[k], lens[k]);
    redisReply *r = writer_cmd(wr, n);
    if (r == NULL)
        writer_redis_fail(wr, argv[0], NULL);
    return r;
}

static void drained_done(writer_t *wr, redisReply *r)
{
    if (wr->node_mode)
        freeReplyObject(r);
}

/* SADD (add = 1) or SREM of s's member. */
static int drained_set(writer_t *wr, const wstream_t *s, int add)
{
    const char *argv[3] = { add ? "SADD" : "SREM", KEY_DRAINED, s->member };
    size_t lens[3] = { 4, strlen(KEY_DRAINED), strlen(s->member) };
    char why[300] = "";
    redisReply *r = drained_cmd(wr, 3, argv, lens, why, sizeof why);
    int ok = r != NULL && r->type == REDIS_REPLY_INTEGER;
    if (!ok)
        log_warn("writer: %s %s %s: %s", argv[0], KEY_DRAINED, s->member,
                 r && r->type == REDIS_REPLY_ERROR ? r->str : why[0] ? why : "no reply");
    drained_done(wr, r);
    return ok ? 0 : -1;
}

/* Which of our streams not yet looked up (drained_known = 0) the drained set holds: one
 * SMISMEMBER, after streams were added, a reconnect, or the set found shrunk. A writer that
 * restarts reads only the live streams, re-marks nothing and looks up no old voucher. A
 * stream not in the set is read (again). */
int writer_sweep_read(writer_t *wr)
{
    size_t k = 0;
    for (size_t i = 0; i < wr->nstreams; i++)
        k += !wr->streams[i].drained_known;
    if (k == 0)
        return 0;
    const char **argv = xmalloc((k + 2) * sizeof *argv);
    size_t *lens = xmalloc((k + 2) * sizeof *lens);
    argv[0] = "SMISMEMBER";
    argv[1] = KEY_DRAINED;
    lens[0] = 10;
    lens[1] = strlen(KEY_DRAINED);
    size_t n = 2;
    for (size_t i = 0; i < wr->nstreams; i++)
        if (!wr->streams[i].drained_known) {
            argv[n] = wr->streams[i].member;
            lens[n++] = strlen(wr->streams[i].member);
        }
    char why[300] = "";
    redisReply *r = drained_cmd(wr, (int)n, argv, lens, why, sizeof why);
    int ok = r != NULL && r->type == REDIS_REPLY_ARRAY && r->elements == k;
    if (ok) {
        size_t j = 0;
        for (size_t i = 0; i < wr->nstreams; i++) {
            wstream_t *s = &wr->streams[i];
            if (s->drained_known)
                continue;
            const redisReply *e = r->element[j++];
            s->drained = e->type == REDIS_REPLY_INTEGER && e->integer == 1;
            s->drained_known = 1;
        }
    } else {
        log_warn("writer: SMISMEMBER %s: %s", KEY_DRAINED,
                 r && r->type == REDIS_REPLY_ERROR ? r->str : why[0] ? why : "no reply");
    }
    drained_done(wr, r);
    free(argv);
    free(lens);
    return ok ? 0 : -1;
}

/* The drained set may be lost (Redis data loss, its master flushed, an operator's DEL):
 * then every stream must be read again and re-marked as before. One SCARD per pass tells
 * it cheaply: the set holds at least our drained streams unless some were taken out. */
static int drained_check(writer_t *wr)
{
    int64_t ours = 0;
    for (size_t i = 0; i < wr->nstreams; i++)
        ours += wr->streams[i].drained;
    if (ours == 0)
        return 0;
    const char *argv[2] = { "SCARD", KEY_DRAINED };
    size_t lens[2] = { 5, strlen(KEY_DRAINED) };
    char why[300] = "";
    redisReply *r = drained_cmd(wr, 2, argv, lens, why, sizeof why);
    int ok = r != NULL && r->type == REDIS_REPLY_INTEGER;
    long long card = ok ? r->integer : 0;
    drained_done(wr, r);
    if (!ok || card >= ours)
        return ok ? 0 : -1;
    log_warn("writer: %s holds %lld members, fewer than the %lld streams this writer skips "
             "as drained: reading it again, streams not in it are read again",
             KEY_DRAINED, card, (long long)ours);
    for (size_t i = 0; i < wr->nstreams; i++)
        if (wr->streams[i].drained)
            wr->streams[i].drained_known = 0;
    int rc = writer_sweep_read(wr);
    for (size_t i = 0; i < wr->nstreams; i++)
        if (!wr->streams[i].drained)
            wr->streams[i].group_ok = 0;   /* maybe lost with the set: recreated if so */
    wr->streams_at = 0;
    wr->need_pending = 1;
    return rc;
}

/* Marks the streams no order lookup needs to ask any more (orders.h): the voucher's sale
 * ended DRAIN_MARGIN_S before now (the stream's Redis's TIME, read before its XINFO) and
 * g1 had nothing undelivered or pending at that XINFO. Only in stream mode: queue mode's
 * orders wait in a process's memory, the lab's in their own lists. A marked stream is no
 * longer read nor asked by the metrics pass. */
void writer_sweep_marks(writer_t *wr, int64_t now)
{
    if (drained_check(wr) != 0)
        return;
    int need_read = 0;
    for (size_t i = 0; i < wr->nstreams; i++)
        need_read |= wr->streams[i].idle && !wr->streams[i].drained_known;
    if (need_read && writer_sweep_read(wr) != 0)
        return;
    uint64_t mono = clock_mono_ms();
    for (size_t i = 0; i < wr->nstreams && wr->rc; i++) {
        wstream_t *s = &wr->streams[i];
        if (s->drained || !s->idle || s->member[0] == '\0')
            continue;
        if (!s->vknown) {
            if (mono < s->vlook_at)
                continue;
            s->vlook_at = mono + VOUCHER_RELOOK_MS;
            if (writer_streams_voucher(wr, s) != 0 || !s->vknown)
                continue;
        }
        if (now < s->vend + DRAIN_MARGIN_S)
            continue;
        /* ended by the end read before: read it again (an admin's extend moves it later,
         * api_sale.c), once per stream that is about to be marked */
        if (writer_streams_voucher(wr, s) != 0 || now < s->vend + DRAIN_MARGIN_S)
            continue;
        if (drained_set(wr, s, 1) != 0)
            return;
        s->drained = 1;
        s->idle = 0;
        log_info("writer: %s: the sale has ended and every order is in SQL; order lookups "
                 "and this writer's reads skip it (%s)", s->key, KEY_DRAINED);
    }
}

/* g1's pending count and lag in an XINFO GROUPS reply. Returns 1 if g1 is there (lag_known:
 * Redis could tell the lag; nil after deleted entries), 0 if not. */
int writer_sweep_group_state(const redisReply *r, int64_t *pending, int64_t *lag, int *lag_known)
{
    *pending = *lag = 0;
    *lag_known = 0;
    if (r->type != REDIS_REPLY_ARRAY)
        return 0;
    for (size_t g = 0; g < r->elements; g++) {
        const redisReply *gr = r->element[g];
        if (gr->type != REDIS_REPLY_ARRAY)
            continue;
        int mine = 0, known = 0;
        int64_t p = 0, l = 0;
        for (size_t k = 0; k + 1 < gr->elements; k += 2) {
            const redisReply *key = gr->element[k], *val = gr->element[k + 1];
            if (str_eq(key, "name"))
                mine = str_eq(val, KEY_GROUP);
            else if (str_eq(key, "pending") && val->type == REDIS_REPLY_INTEGER)
                p = val->integer;
            else if (str_eq(key, "lag") && val->type == REDIS_REPLY_INTEGER) {
                l = val->integer;
                known = 1;
            }
        }
        if (mine) {
            *pending = p;
            *lag = l;
            *lag_known = known;
            return 1;
        }
    }
    return 0;
}

/* A drained stream found with something to write: read again at once. */
static void undrain(writer_t *wr, wstream_t *s)
{
    s->drained = 0;
    s->idle = 0;
    s->group_ok = 0;             /* made again if it was lost */
    wr->streams_at = 0;
    wr->need_pending = 1;        /* any entries of ours pending there, then new ones */
}

/* A drained stream that just got entries of ours (writer_life.c: a timeout's events): out
 * of the set and read again, quietly -- they were expected. */
int writer_sweep_undrain(writer_t *wr, wstream_t *s)
{
    if (!s->drained)
        return 0;
    if (drained_set(wr, s, 0) != 0 && wr->rc == NULL)
        return -1;
    undrain(wr, s);
    return 0;
}

/* The safety net (every --writer-drain-sweep-ms, SWEEP_MAX streams, round-robin): a drained
 * stream must stay without undelivered or pending entries -- nothing can be admitted
 * after its sale -- but an operator's XADD or a bug must not strand orders. One pipeline
 * of XINFO GROUPS for the next SWEEP_MAX drained streams and one SMISMEMBER of their
 * members: a stream showing lag or pending (or whose g1 is gone) is taken out of the set
 * and read again, loudly (writer_undrained); one no longer in the set (an operator's SREM)
 * is read again and re-marked as usual. */
int writer_sweep_run(writer_t *wr)
{
    size_t idx[SWEEP_MAX], k = 0;
    for (size_t j = 0; j < wr->nstreams && k < SWEEP_MAX; j++) {
        size_t i = (wr->sweep_next + j) % wr->nstreams;
        if (wr->streams[i].drained)
            idx[k++] = i;
    }
    if (k == 0)
        return 0;
    wr->sweep_next = (idx[k - 1] + 1) % wr->nstreams;
    for (size_t j = 0; j < k; j++) {
        size_t n = 0;
        writer_args(wr, &n, "XINFO");
        writer_args(wr, &n, "GROUPS");
        writer_args(wr, &n, wr->streams[idx[j]].key);
        writer_append(wr, n);
    }
    int bad[SWEEP_MAX];
    for (size_t j = 0; j < k; j++) {
        void *rv = NULL;
        if (redisGetReply(wr->rc, &rv) != REDIS_OK)
            return writer_redis_fail(wr, "XINFO GROUPS", NULL);
        const redisReply *r = rv;
        wstream_t *s = &wr->streams[idx[j]];
        int64_t p, l;
        int known;
        bad[j] = 0;
        if (r->type == REDIS_REPLY_ERROR) {
            /* "no such key": nothing to write. MOVED and the like: the stream list is read
             * again and the stream's new owner checks it. */
            if (strncmp(r->str, "ERR no such key", 15) != 0) {
                log_info("writer: sweep: XINFO GROUPS %s: %s", s->key, r->str);
                wr->streams_at = 0;
            }
            continue;
        }
        if (!writer_sweep_group_state(r, &p, &l, &known)) {
            log_error("writer: drained stream %s has no group %s any more; reading it again",
                      s->key, KEY_GROUP);
            bad[j] = 1;
        } else if (p > 0 || l > 0 || !known) {
            log_error("writer: drained stream %s has %lld pending and %s undelivered entries "
                      "after its sale ended; taking it out of %s and reading it again", s->key,
                      (long long)p, known ? (l > 0 ? "some" : "no") : "unknown", KEY_DRAINED);
            bad[j] = 1;
        }
    }
    for (size_t j = 0; j < k; j++) {
        wstream_t *s = &wr->streams[idx[j]];
        if (!bad[j])
            continue;
        metric_inc(&wr->m->writer_undrained);
        /* out of the set first: order lookups ask the stream's bucket again */
        if (drained_set(wr, s, 0) != 0 && wr->rc == NULL)
            return -1;
        undrain(wr, s);
    }
    /* still members? (the set is checked as a whole by drained_check every pass) */
    for (size_t j = 0; j < k; j++)
        if (wr->streams[idx[j]].drained)
            wr->streams[idx[j]].drained_known = 0;
    if (writer_sweep_read(wr) != 0)
        return wr->rc ? 0 : -1;
    for (size_t j = 0; j < k; j++) {
        wstream_t *s = &wr->streams[idx[j]];
        if (!bad[j] && !s->drained) {
            log_warn("writer: stream %s is no longer in %s; reading it again", s->key,
                     KEY_DRAINED);
            undrain(wr, s);
        }
    }
    return 0;
}

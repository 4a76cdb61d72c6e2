/* writer_streams.c -- the order writer's stream registry (writer_int.h): which streams it
 * reads.
 *
 * seckill:streams lists every order stream (a voucher id, or a bucket's member: buckets.h)
 * and is never trimmed. Every ~1 s, and whenever a read comes back empty, the writer
 * re-reads it: on a single Redis an SCARD equal to the last full read's count stands for
 * it (the registry only grows), with a full SMEMBERS every REGISTRY_FULL_MS and after a
 * reconnect; a sub-writer reads it through the cluster client and keeps the streams of its
 * node (writer_cluster.c). Known streams keep their state, new ones are added (their
 * pending entries replayed), unregistered ones dropped. Then which are drained is looked
 * up (writer_sweep.c) and each live one gets its group: XGROUP CREATE key g1 0 MKSTREAM
 * (BUSYGROUP is fine). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <hiredis/hiredis.h>

#include "core/app.h"
#include "core/clock.h"
#include "core/key.h"
#include "core/log.h"
#include "core/sb.h"
#include "core/xmem.h"
#include "writer/writer_int.h"

#define REGISTRY_FULL_MS 30000    /* single Redis: SMEMBERS seckill:streams at least this often */

static int group_create(writer_t *wr, wstream_t *s)
{
    size_t n = 0;
    writer_args(wr, &n, "XGROUP");
    writer_args(wr, &n, "CREATE");
    writer_args(wr, &n, s->key);
    writer_args(wr, &n, KEY_GROUP);
    writer_args(wr, &n, "0");
    writer_args(wr, &n, "MKSTREAM");
    redisReply *r = writer_cmd(wr, n);
    if (!r)
        return writer_redis_fail(wr, "XGROUP CREATE", NULL);
    if (r->type == REDIS_REPLY_ERROR && strncmp(r->str, "BUSYGROUP", 9) != 0)
        return writer_redis_fail(wr, "XGROUP CREATE", r);
    s->group_ok = 1;
    return 0;
}

/* The end of a refresh, the list known: which streams are drained, before the pending pass
 * and the first read name them (a writer that (re)starts reads only the live ones; on a
 * failure they are read), and the live ones' groups. */
static int streams_ready(writer_t *wr)
{
    if (wr->drains && writer_sweep_read(wr) != 0 && wr->rc == NULL)
        return -1;
    for (size_t i = 0; i < wr->nstreams; i++)
        if (!wr->streams[i].group_ok && !wr->streams[i].drained &&
            group_create(wr, &wr->streams[i]) != 0)
            return -1;
    wr->streams_at = clock_mono_ms() + STREAMS_REFRESH_MS;
    writer_redis_up(wr);
    return 0;
}

/* Re-reads seckill:streams: keeps known streams, adds new ones, drops the ones no longer
 * registered. Creates missing groups. */
int writer_streams_refresh(writer_t *wr)
{
    size_t n = 0;
    redisReply *r;
    if (wr->node_mode) {
        r = writer_cluster_streams(wr);
        if (r == NULL) {
            wr->streams_at = clock_mono_ms() + STREAMS_REFRESH_MS;
            return -1;
        }
    } else {
        /* The registry only grows (never trimmed): as many members as at the last full
         * read means the same ones -- one SCARD instead of a reply that grows with history.
         * A full read after a reconnect and every REGISTRY_FULL_MS all the same. */
        if (wr->reg_card >= 0 && clock_mono_ms() < wr->reg_full_at) {
            writer_args(wr, &n, "SCARD");
            writer_args(wr, &n, KEY_STREAMS);
            r = writer_cmd(wr, n);
            if (!r || r->type != REDIS_REPLY_INTEGER)
                return writer_redis_fail(wr, "SCARD " KEY_STREAMS, r);
            if (r->integer == wr->reg_card)
                return streams_ready(wr);
            n = 0;
        }
        writer_args(wr, &n, "SMEMBERS");
        writer_args(wr, &n, KEY_STREAMS);
        r = writer_cmd(wr, n);
        if (!r || r->type != REDIS_REPLY_ARRAY)
            return writer_redis_fail(wr, "SMEMBERS " KEY_STREAMS, r);
        wr->reg_card = (long long)r->elements;
        wr->reg_full_at = clock_mono_ms() + REGISTRY_FULL_MS;
    }
    wstream_t *next = xrealloc(NULL, (r->elements + 1) * sizeof *next);
    size_t nn = 0;
    int added = 0;
    for (size_t i = 0; i < r->elements; i++) {
        const redisReply *e = r->element[i];
        int64_t vid;
        int bucket = 0, nb = 1;
        if (!is_str(e) || (sb_parse_pos(e->str, e->len, &vid) != 0 &&
                           key_bmember_parse(e->str, e->len, &vid, &bucket, &nb) != 0)) {
            log_debug("writer: ignoring member of %s that is not a voucher id", KEY_STREAMS);
            continue;
        }
        size_t k = 0;
        while (k < wr->nstreams && (wr->streams[k].vid != vid || wr->streams[k].bucket != bucket))
            k++;
        if (k < wr->nstreams) {
            if (!wr->node_mode || writer_cluster_mine(wr, wr->streams[k].key))
                next[nn++] = wr->streams[k];
            else
                log_info("writer: order stream %s moved to another node", wr->streams[k].key);
            continue;
        }
        wstream_t *s = &next[nn];
        memset(s, 0, sizeof *s);
        s->vid = vid;
        s->bucket = bucket;
        if (key_btag(s->tag, sizeof s->tag, vid, bucket, nb) < 0 ||
            key_stream_t(s->key, sizeof s->key, s->tag) < 0 || e->len >= sizeof s->member)
            continue;
        memcpy(s->member, e->str, e->len);
        s->member[e->len] = '\0';
        if (wr->node_mode && !writer_cluster_mine(wr, s->key))
            continue;
        nn++;
        added++;
        if (wr->node_mode)
            log_info("writer: reading order stream %s on %s:%d", s->key, wr->addr.host,
                     wr->addr.port);
        else
            log_info("writer: reading order stream %s", s->key);
    }
    if (wr->node_mode)
        freeReplyObject(r);   /* the cluster client's; our own connection's live in the arena */
    free(wr->streams);
    wr->streams = next;
    wr->nstreams = nn;
    if (added)
        wr->need_pending = 1;
    return streams_ready(wr);
}

size_t writer_streams_index(writer_t *wr, const redisReply *key)
{
    for (size_t i = 0; i < wr->nstreams; i++)
        if (str_eq(key, wr->streams[i].key))
            return i;
    return (size_t)-1;
}

/* The stream's voucher from SQL: vknown, vbegin, vend once SQL has it as a flash-sale
 * voucher. 0 (found or not), or -1 when SQL failed. */
int writer_streams_voucher(writer_t *wr, wstream_t *s)
{
    char err[512] = "";
    if (!wr->st)
        wr->st = store_open(wr->app->db_url, wr->sql_timeout_ms, err, sizeof err);
    if (!wr->st)
        return -1;
    store_voucher_t v;
    memset(&v, 0, sizeof v);
    int rc = store_voucher_get(wr->st, s->vid, &v);
    if (rc == STORE_OK && v.is_seckill) {
        s->vknown = 1;
        s->vbegin = v.begin_time;
        s->vend = v.end_time;
    }
    store_voucher_clear(&v);
    return rc == STORE_OK || rc == STORE_NOTFOUND ? 0 : -1;
}

size_t writer_streams_live(const writer_t *wr)
{
    size_t n = 0;
    for (size_t i = 0; i < wr->nstreams; i++)
        n += !wr->streams[i].drained;
    return n;
}

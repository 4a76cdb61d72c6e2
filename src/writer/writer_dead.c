/* writer_dead.c -- the order writer's dead letters (writer_int.h).
 *
 * An entry that can never parse (no os field, a missing or non-numeric order or user id:
 * sentry.h), or that the admission script would never have written (a user id past
 * 2^53-1, a time before 2000 or past this host's clock + 1 h: parse_entry in writer.c; a
 * time outside the voucher's sale window, a voucher SQL does not have: writer_dead_check)
 * would otherwise reach SQL -- or, with a time SQL cannot store, fail every retry of its
 * batch -- so it is moved aside: XADD seckill:dead:{voucher} (stream, entry, reason and
 * its original fields) and XACK in one MULTI/EXEC (writer_dead_append, after the batch's
 * commit), logged and counted. An entry deleted from the stream while pending (nil
 * fields) has nothing left to write: it is acked and logged. */
#include <stdlib.h>
#include <string.h>

#include <hiredis/hiredis.h>

#include "core/key.h"
#include "core/xmem.h"
#include "writer/writer_int.h"

#define DEAD_MAXLEN "100000"

static int outside(const wstream_t *s, const store_order_t *o)
{
    return o->create_time < s->vbegin - WRITER_TIME_SLACK_S ||
           o->create_time > s->vend + WRITER_TIME_SLACK_S;
}

/* Looks up, once per stream, the voucher of every stream with orders in the batch
 * (is it a flash-sale voucher in SQL, and its window), then turns orders of a missing
 * voucher, or outside its window, into dead letters. Returns 0, or -1 when SQL failed
 * (nothing is decided: the caller retries). */
int writer_dead_check(writer_t *wr)
{
    for (size_t i = 0; i < wr->nents; i++) {
        wentry_t *e = &wr->ents[i];
        if (e->kind != E_ORDER)
            continue;
        wstream_t *s = &wr->streams[e->si];
        if (!s->vknown && writer_streams_voucher(wr, s) != 0)
            return -1;
        if (!s->vknown) {
            e->kind = E_DEAD;
            e->reason = "no such flash-sale voucher in SQL";
        } else {
            for (size_t k = e->o0; k < e->o0 + e->no; k++) {
                if (!outside(s, &wr->orders[k]))
                    continue;
                /* the window may have moved since it was read (an admin's extend,
                 * api_sale.c): read it again before calling the order dead */
                if (writer_streams_voucher(wr, s) != 0)
                    return -1;
                if (outside(s, &wr->orders[k])) {
                    e->kind = E_DEAD;
                    e->reason = "time outside the voucher's sale window";
                    break;
                }
            }
        }
    }
    return 0;
}

/* MULTI; XADD seckill:dead:{v} ...; XACK; EXEC -- 4 replies. */
void writer_dead_append(writer_t *wr, const wentry_t *e)
{
    const wstream_t *s = &wr->streams[e->si];
    char dkey[96];
    key_dead_t(dkey, sizeof dkey, s->tag);
    size_t n = 0;
    writer_args(wr, &n, "MULTI");
    writer_append(wr, n);
    n = 0;
    writer_args(wr, &n, "XADD");
    writer_args(wr, &n, dkey);
    writer_args(wr, &n, "MAXLEN");
    writer_args(wr, &n, "~");
    writer_args(wr, &n, DEAD_MAXLEN);
    writer_args(wr, &n, "*");
    writer_args(wr, &n, "stream");
    writer_args(wr, &n, s->key);
    writer_args(wr, &n, "entry");
    writer_args(wr, &n, e->id);
    writer_args(wr, &n, "reason");
    writer_args(wr, &n, e->reason);
    writer_args(wr, &n, "consumer");
    writer_args(wr, &n, wr->name);
    /* The original fields follow as "f:<name>" <value>, so they cannot clash with ours.
     * hiredis copies the arguments when appending, so the names can be freed after. */
    char *names = NULL;
    if (e->fields) {
        size_t total = 0;
        for (size_t i = 0; i + 1 < e->fields->elements; i += 2)
            if (is_str(e->fields->element[i]))
                total += e->fields->element[i]->len + 2;
        names = xrealloc(NULL, total);
        char *p = names;
        for (size_t i = 0; i + 1 < e->fields->elements; i += 2) {
            const redisReply *k = e->fields->element[i], *v = e->fields->element[i + 1];
            if (!is_str(k) || !is_str(v))
                continue;
            p[0] = 'f';
            p[1] = ':';
            memcpy(p + 2, k->str, k->len);
            writer_arg(wr, &n, p, k->len + 2);
            writer_arg(wr, &n, v->str, v->len);
            p += k->len + 2;
        }
    }
    writer_append(wr, n);
    free(names);
    n = 0;
    writer_args(wr, &n, "XACK");
    writer_args(wr, &n, s->key);
    writer_args(wr, &n, KEY_GROUP);
    writer_args(wr, &n, e->id);
    writer_append(wr, n);
    n = 0;
    writer_args(wr, &n, "EXEC");
    writer_append(wr, n);
}

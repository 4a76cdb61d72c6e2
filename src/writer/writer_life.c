/* writer_life.c -- lifecycle events in the order streams (writer_int.h), each a CAS on the
 * order's status (a replay changes nothing): a cancelled or timed-out order
 * (src/order/life.lua) becomes status 4 with its unit back in the voucher's SQL stock
 * (store_order_cancel); a paid one 2 with pay_time (store_order_pay); a cancelled one
 * whose payment was refunded 6 with refund_time (store_order_refund).
 *
 * An event follows its order's own entry in the same stream, and a batch writes its
 * orders before its events, so within one writer the insert always comes first. With
 * several writers reading one consumer group (instances, or a claim after a crash) the
 * order's entry may be in another writer's batch not yet committed: SQL has no such order
 * yet, and the event waits -- it is not acked, and the claim pass hands it out again once
 * idle (--writer-claim-idle-ms). An event whose order SQL still lacks EVENT_WAIT_S after
 * it was queued (the order went to the dead letters or was fenced by a rebuild) goes to
 * the dead letters too. */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "core/log.h"
#include "writer/writer_int.h"

#define EVENT_WAIT_S 3600

int writer_life_parse(writer_t *wr, wentry_t *e, const redisReply *fields)
{
    const char *reason = NULL;
    int rc = sentry_event(fields, &e->ev, &reason);
    if (rc == 0)
        return 0;
    if (rc < 0) {
        e->kind = E_DEAD;
        e->reason = reason;
    } else if (e->ev.user_id > WRITER_MAX_USER_ID) {
        e->kind = E_DEAD;
        e->reason = "userId out of range";
    } else {
        e->kind = E_EVENT;
        e->reason = NULL;
    }
    (void)wr;
    return 1;
}

/* The event's order is not in SQL (yet): wait, or give up on it once it is old. */
static int not_yet(writer_t *wr, wentry_t *e)
{
    int64_t queued_s = strtoll(e->id, NULL, 10) / 1000;
    if ((int64_t)time(NULL) - queued_s < EVENT_WAIT_S) {
        e->kind = E_WAIT;
        return 0;
    }
    e->kind = E_DEAD;
    e->reason = "event of an order SQL never had";
    log_error("writer: %s entry %s: %s (order %lld): moved to seckill:dead:{%s}",
              wr->streams[e->si].key, e->id, e->reason, (long long)e->ev.order_id,
              wr->streams[e->si].tag);
    return 1;
}

size_t writer_life_apply(writer_t *wr)
{
    size_t dead = 0;
    for (size_t i = 0; i < wr->nents; i++) {
        wentry_t *e = &wr->ents[i];
        if (e->kind != E_EVENT)
            continue;
        char err[512] = "";
        if (!wr->st)
            wr->st = store_open(wr->app->db_url, wr->sql_timeout_ms, err, sizeof err);
        int was = 0;
        int rc = STORE_ERR, want = 1;
        if (wr->st) {
            switch (e->ev.kind) {
            case 'p':
                rc = store_order_pay(wr->st, e->ev.order_id, e->ev.ts, &was);
                want = 2;
                break;
            case 'r':
                rc = store_order_refund(wr->st, e->ev.order_id, e->ev.ts, &was);
                want = 6;
                break;
            default:
                rc = store_order_cancel(wr->st, e->ev.order_id, e->ev.ts, &was);
                want = 4;
                break;
            }
        }
        if (rc == STORE_NOTFOUND) {
            dead += (size_t)not_yet(wr, e);
        } else if (rc != STORE_OK) {
            /* left pending: the claim pass brings it back */
            log_warn("writer: %s entry %s: event %c of order %lld not applied (%s); it stays "
                     "pending", wr->streams[e->si].key, e->id, e->ev.kind, (long long)e->ev.order_id,
                     wr->st ? store_errmsg(wr->st) : err);
            e->kind = E_WAIT;
            metric_inc(&wr->m->sql_errors);
        } else if (e->ev.kind == 'r' && was == 1) {
            e->kind = E_WAIT;   /* its cancel is still on its way (another writer's batch) */
        } else if (was != (e->ev.kind == 'r' ? 4 : 1) && was != want) {
            /* Redis decided from its state; SQL says otherwise: SQL is the record */
            log_error("writer: %s entry %s: event %c of order %lld found status %d in SQL; "
                      "left as it is", wr->streams[e->si].key, e->id, e->ev.kind,
                      (long long)e->ev.order_id, was);
        }
    }
    return dead;
}

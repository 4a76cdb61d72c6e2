/* sentry.c -- reading the order stream's entries (sentry.h): one entry's orders or
 * lifecycle events, and a whole stream in pages. */
#include "sale/sentry.h"

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <hiredis/hiredis.h>

#include "core/xmem.h"
#include "redis/rconn.h"

#define SCAN_PAGE 10000   /* entries per XRANGE of sentry_scan */

static int is_str(const redisReply *r)
{
    return r->type == REDIS_REPLY_STRING || r->type == REDIS_REPLY_STATUS;
}

static int str_eq(const redisReply *r, const char *s)
{
    size_t n = strlen(s);
    return r->len == n && memcmp(r->str, s, n) == 0;
}

/* More orders in one entry than this is not what admit.lua writes (64 admissions per
 * call at most), nor more events what life.lua writes (SENTRY_MAX_EVENTS): refused before
 * a reader allocates for them. */
#define SENTRY_MAX_ORDERS 4096

/* At most how many "<orderId> <userId>" pairs [p, end) may hold: a pair and its space take
 * 4 bytes at least ("1 1 "), the last one 3; 1 for what is too short to be a pair (the
 * reader's next says why). */
static size_t pairs_bound(const char *p, const char *end)
{
    size_t n = ((size_t)(end - p) + 1) / 4;
    return n > SENTRY_MAX_ORDERS ? SENTRY_MAX_ORDERS : n > 0 ? n : 1;
}

/* The value of the eight bytes at s if all are ASCII digits, else -1. SWAR: the digits'
 * bytes checked and combined in pairs, fours, then eights with three multiplications
 * (the first digit in the lowest byte). */
static int64_t eight_digits(const char *s)
{
    uint64_t x;
    memcpy(&x, s, 8);
#if __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
    x = __builtin_bswap64(x);   /* the first digit in the lowest byte */
#endif
    /* every byte 0x30..0x3f, and still 0x3_ after adding 6: 0x30..0x39 (no carry between
     * bytes once the first test holds) */
    if ((x & 0xF0F0F0F0F0F0F0F0u) != 0x3030303030303030u ||
        ((x + 0x0606060606060606u) & 0xF0F0F0F0F0F0F0F0u) != 0x3030303030303030u)
        return -1;
    x -= 0x3030303030303030u;
    x = x * 10 + (x >> 8);   /* pairs: byte 2k holds the value of digits 2k, 2k+1 */
    x = (((x & 0x000000FF000000FFu) * (100 + (1000000ull << 32))) +
         (((x >> 16) & 0x000000FF000000FFu) * (1 + (10000ull << 32)))) >> 32;
    return (int64_t)(uint32_t)x;
}

/* The next space-separated number of [*p, end) into *out (zero_ok: "0" too), *p moved
 * past it and its one separating space. 0, or -1 when missing or bad: a positive decimal
 * (or "0" with zero_ok) that fits an int64_t, no sign, no leading or trailing space. One
 * pass over the bytes (no memchr first): the writer reads two per order. */
static int next_num(const char **p, const char *end, int zero_ok, int64_t *out)
{
    const char *s = *p;
    uint64_t v = 0;
    size_t n = 0;
    /* eight digits at a time while eight are there (an order id has 18, a user id ~10):
     * ~3x fewer instructions than byte by byte; at most 19 digits in all, so v cannot
     * overflow before the check below */
    int64_t e8;
    while (end - s >= 8 && n + 8 <= 19 && (e8 = eight_digits(s)) >= 0) {
        v = v * 100000000u + (uint64_t)e8;
        s += 8;
        n += 8;
    }
    for (; s < end && *s != ' '; s++, n++) {
        unsigned d = (unsigned)(unsigned char)*s - '0';
        if (d > 9 || n == 19)
            return -1;
        v = v * 10 + d;
    }
    if (n == 0 || v > (uint64_t)INT64_MAX || (v == 0 && !(zero_ok && n == 1)))
        return -1;
    *out = (int64_t)v;
    if (s == end) {
        *p = end;
        return 0;
    }
    *p = s + 1;
    return *p == end ? -1 : 0;   /* a trailing space */
}

int sentry_open(const redisReply *f, sentry_it_t *it, size_t *bound, const char **reason)
{
    memset(it, 0, sizeof *it);
    *bound = 0;
    if (f == NULL || f->type != REDIS_REPLY_ARRAY || f->elements % 2 != 0) {
        *reason = "fields are not field/value pairs";
        return -1;
    }
    const redisReply *os = NULL;
    for (size_t i = 0; i + 1 < f->elements; i += 2) {
        const redisReply *k = f->element[i], *v = f->element[i + 1];
        if (!is_str(k) || !is_str(v)) {
            *reason = "a field or value is not a string";
            return -1;
        }
        if (str_eq(k, "os"))
            os = v;
    }
    if (os == NULL) {
        *reason = "no os field";
        return -1;
    }
    const char *p = os->str, *end = os->str + os->len;
    if (next_num(&p, end, 1, &it->ts) != 0) {
        *reason = "bad ts";
        return -1;
    }
    if (next_num(&p, end, 1, &it->ep) != 0) {
        *reason = "bad ep";
        return -1;
    }
    if (p == end) {
        *reason = "missing or bad id";
        return -1;
    }
    it->p = p;
    it->end = end;
    it->bound = *bound = pairs_bound(p, end);
    return 0;
}

int sentry_event(const redisReply *f, sentry_ev_t *ev, const char **reason)
{
    memset(ev, 0, sizeof *ev);
    if (f == NULL || f->type != REDIS_REPLY_ARRAY || f->elements % 2 != 0)
        return 0;
    const redisReply *v = NULL;
    for (size_t i = 0; i + 1 < f->elements; i += 2)
        if (is_str(f->element[i]) && str_eq(f->element[i], "ev"))
            v = f->element[i + 1];
    if (v == NULL)
        return 0;
    if (!is_str(v) || v->len < 2 || !strchr("ctpr", v->str[0]) || v->str[1] != ' ') {
        *reason = "bad event kind";
        return -1;
    }
    const char *p = v->str + 2, *end = v->str + v->len;
    if (next_num(&p, end, 0, &ev->order_id) != 0 || next_num(&p, end, 0, &ev->user_id) != 0 ||
        next_num(&p, end, 0, &ev->ts) != 0 || next_num(&p, end, 1, &ev->ep) != 0 || p != end) {
        *reason = "bad event";
        return -1;
    }
    ev->kind = v->str[0];
    return 1;
}

/* The evs field of f, or NULL; *both set when f also has an ev field. */
static const redisReply *evs_field(const redisReply *f, int *both)
{
    const redisReply *v = NULL;
    int ev = 0;
    for (size_t i = 0; i + 1 < f->elements; i += 2) {
        if (!is_str(f->element[i]))
            continue;
        if (str_eq(f->element[i], "evs"))
            v = f->element[i + 1];
        else if (str_eq(f->element[i], "ev"))
            ev = 1;
    }
    *both = v != NULL && ev;
    return v;
}

int sentry_evopen(const redisReply *f, sentry_evit_t *it, size_t *bound, const char **reason)
{
    memset(it, 0, sizeof *it);
    *bound = 0;
    if (f == NULL || f->type != REDIS_REPLY_ARRAY || f->elements % 2 != 0)
        return 0;
    int both;
    const redisReply *v = evs_field(f, &both);
    if (v == NULL) {
        /* one event (cancel, pay, and what an earlier version's expire wrote) */
        int rc = sentry_event(f, &it->one, reason);
        if (rc == 1)
            it->bound = *bound = 1;
        return rc;
    }
    if (both) {
        *reason = "both ev and evs fields";
        return -1;
    }
    /* the kinds without a payment: a payment's entry is one event (its pay field) */
    if (!is_str(v) || v->len < 2 || (v->str[0] != 'c' && v->str[0] != 't') ||
        v->str[1] != ' ') {
        *reason = "bad event kind";
        return -1;
    }
    const char *p = v->str + 2, *end = v->str + v->len;
    if (next_num(&p, end, 0, &it->ts) != 0 || next_num(&p, end, 1, &it->ep) != 0 || p == end) {
        *reason = "bad events";
        return -1;
    }
    it->kind = v->str[0];
    it->multi = 1;
    it->p = p;
    it->end = end;
    it->bound = *bound = pairs_bound(p, end);
    return 1;
}

int sentry_evnext(sentry_evit_t *it, sentry_ev_t *out, const char **reason)
{
    if (!it->multi) {
        if (it->taken == it->bound)
            return 0;
        it->taken++;
        *out = it->one;
        return 1;
    }
    if (it->p == it->end)
        return 0;
    int64_t order_id, user_id;
    if (next_num(&it->p, it->end, 0, &order_id) != 0 ||
        next_num(&it->p, it->end, 0, &user_id) != 0) {
        *reason = "bad events";
        return -1;
    }
    if (it->taken == it->bound) {
        *reason = "more events than one expire call writes";
        return -1;
    }
    it->taken++;
    *out = (sentry_ev_t){.kind = it->kind, .order_id = order_id, .user_id = user_id,
                         .ts = it->ts, .ep = it->ep};
    return 1;
}

int sentry_next(sentry_it_t *it, sentry_t *out, const char **reason)
{
    if (it->p == it->end)
        return 0;
    int64_t order_id, user_id;
    if (next_num(&it->p, it->end, 0, &order_id) != 0) {
        *reason = "missing or bad id";
        return -1;
    }
    if (next_num(&it->p, it->end, 0, &user_id) != 0) {
        *reason = "missing or bad userId";
        return -1;
    }
    /* *out untouched past the bound: a reader may have made room for that many only */
    if (it->taken == it->bound) {
        *reason = "more orders than one admission call writes";
        return -1;
    }
    it->taken++;
    out->order_id = order_id;
    out->user_id = user_id;
    out->ts = it->ts;
    out->ep = it->ep;
    return 1;
}

int sentry_scan(redisContext *c, const char *key, sentry_scan_fn fn, void *ctx, char *err,
                size_t errlen)
{
    char start[64] = "-", why[256];
    sentry_t *orders = NULL;
    size_t cap = 0;
    int rc = 0;
    for (;;) {
        redisReply *r = rconn_cmdf(c, why, sizeof why, "XRANGE %s %s + COUNT %d", key, start,
                                   SCAN_PAGE);
        if (r == NULL || r->type != REDIS_REPLY_ARRAY) {
            snprintf(err, errlen, "XRANGE %s: %s", key, r ? "unexpected reply" : why);
            if (r)
                freeReplyObject(r);
            rc = -1;
            break;
        }
        size_t n = r->elements;
        for (size_t i = 0; i < n && rc == 0; i++) {
            const redisReply *e = r->element[i];
            if (e->type != REDIS_REPLY_ARRAY || e->elements != 2 ||
                e->element[0]->type != REDIS_REPLY_STRING)
                continue;
            const char *id = e->element[0]->str;
            if (i + 1 == n)
                snprintf(start, sizeof start, "(%s", id);
            /* an order's lifecycle event holds no order: not the readers' of orders */
            sentry_evit_t evit;
            size_t evbound;
            const char *ereason;
            if (sentry_evopen(e->element[1], &evit, &evbound, &ereason) == 1)
                continue;
            /* every order checked before fn sees any: an entry is one unit */
            sentry_it_t it;
            size_t bound, no = 0;
            const char *reason = NULL;
            int got = sentry_open(e->element[1], &it, &bound, &reason);
            if (got == 0) {
                if (bound > cap) {
                    cap = bound;
                    orders = xrealloc(orders, cap * sizeof *orders);
                }
                while ((got = sentry_next(&it, &orders[no], &reason)) == 1)
                    no++;
            }
            rc = got == 0 ? fn(ctx, id, orders, no, NULL) : fn(ctx, id, NULL, 0, reason);
        }
        freeReplyObject(r);
        if (rc != 0 || n < SCAN_PAGE)
            break;
    }
    free(orders);
    return rc == 0 ? 0 : -1;
}

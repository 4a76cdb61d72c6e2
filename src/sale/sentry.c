/* sentry.c -- reading an order stream entry: many orders, one order compact, or named
 * (sentry.h). */
#include "sale/sentry.h"

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <hiredis/hiredis.h>

#include "core/sb.h"

/* A decimal id or number of an entry (sb_parse_pos); zero_ok: "0" too. */
static int dec(const char *z, size_t n, int zero_ok, int64_t *out)
{
    if (zero_ok && n == 1 && z[0] == '0') {
        *out = 0;
        return 0;
    }
    return sb_parse_pos(z, n, out);
}

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
 * call at most): refused before a reader allocates for them. */
#define SENTRY_MAX_ORDERS 4096

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
 * past it and its one separating space. 0, or -1 when missing or bad. What dec() accepts,
 * in one pass over the bytes (no memchr first): the writer reads two per order, twice. */
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

/* next_num of a number open_many has already checked: digits up to a space or the end. */
static int64_t checked_num(const char **p, const char *end)
{
    const char *s = *p;
    uint64_t v = 0;
    for (; s < end && *s != ' '; s++)
        v = v * 10 + (uint64_t)(*s - '0');
    *p = s < end ? s + 1 : end;
    return (int64_t)v;
}

/* "<ts> <ep> <orderId> <userId> ...": checks every number (lazy: ts and ep only, and
 * *norders is a bound: sentry_take checks the pairs); it at the first pair. */
static int open_many(const redisReply *v, sentry_it_t *it, size_t *norders, int lazy,
                     const char **reason)
{
    const char *p = v->str, *end = v->str + v->len;
    if (next_num(&p, end, 1, &it->cur.ts) != 0) {
        *reason = "bad ts";
        return -1;
    }
    if (next_num(&p, end, 1, &it->cur.ep) != 0) {
        *reason = "bad ep";
        return -1;
    }
    it->p = p;
    it->end = end;
    if (lazy) {
        /* a pair and its space take 4 bytes at least ("1 1 "), the last one 3 */
        size_t bound = ((size_t)(end - p) + 1) / 4;
        it->lazy = 1;
        it->left = *norders = bound > SENTRY_MAX_ORDERS ? SENTRY_MAX_ORDERS : bound;
        return 0;
    }
    size_t n = 0;
    int64_t num;
    do {
        if (next_num(&p, end, 0, &num) != 0) {
            *reason = "missing or bad id";
            return -1;
        }
        if (next_num(&p, end, 0, &num) != 0) {
            *reason = "missing or bad userId";
            return -1;
        }
        if (++n > SENTRY_MAX_ORDERS) {
            *reason = "more orders than one admission call writes";
            return -1;
        }
    } while (p < end);
    it->left = *norders = n;
    return 0;
}

/* "<orderId> <userId> <ts> <ep>" */
static int parse_compact(const redisReply *v, sentry_t *out, const char **reason)
{
    static const char *const bad[4] = {"missing or bad id", "missing or bad userId",
                                       "bad ts", "bad ep"};
    int64_t num[4];
    const char *p = v->str, *end = v->str + v->len;
    for (int k = 0; k < 4; k++) {
        const char *sp = memchr(p, ' ', (size_t)(end - p));
        const char *e = k < 3 ? sp : end;
        if (e == NULL || (k == 3 && sp != NULL) || dec(p, (size_t)(e - p), k >= 2, &num[k]) != 0) {
            *reason = bad[k];
            return -1;
        }
        p = e + (k < 3);
    }
    out->order_id = num[0];
    out->user_id = num[1];
    out->ts = num[2];
    out->ep = num[3];
    return 0;
}

/* The named form's fields into *out. */
static int parse_named(const redisReply *fid, const redisReply *fuser,
                       const redisReply *fvoucher, const redisReply *fts,
                       const redisReply *fep, int64_t voucher_id, sentry_t *out,
                       const char **reason)
{
    int64_t vid = 0;
    if (!fid || dec(fid->str, fid->len, 0, &out->order_id) != 0) {
        *reason = "missing or bad id";
        return -1;
    }
    if (!fuser || dec(fuser->str, fuser->len, 0, &out->user_id) != 0) {
        *reason = "missing or bad userId";
        return -1;
    }
    if (!fvoucher || dec(fvoucher->str, fvoucher->len, 0, &vid) != 0) {
        *reason = "missing or bad voucherId";
        return -1;
    }
    if (vid != voucher_id) {
        *reason = "voucherId is not the stream's voucher";
        return -1;
    }
    if (fts && dec(fts->str, fts->len, 0, &out->ts) != 0)
        out->ts = 0;
    if (fep && dec(fep->str, fep->len, 1, &out->ep) != 0) {
        *reason = "bad ep";
        return -1;
    }
    return 0;
}

static int open_entry(const redisReply *f, int64_t voucher_id, sentry_it_t *it,
                      size_t *norders, int lazy, const char **reason)
{
    memset(it, 0, sizeof *it);
    *norders = 0;
    if (f == NULL || f->type != REDIS_REPLY_ARRAY || f->elements % 2 != 0) {
        *reason = "fields are not field/value pairs";
        return -1;
    }
    const redisReply *fos = NULL, *fo = NULL, *fid = NULL, *fuser = NULL, *fvoucher = NULL,
                     *fts = NULL, *fep = NULL;
    for (size_t i = 0; i + 1 < f->elements; i += 2) {
        const redisReply *k = f->element[i], *v = f->element[i + 1];
        if (!is_str(k) || !is_str(v)) {
            *reason = "a field or value is not a string";
            return -1;
        }
        if (str_eq(k, "os"))
            fos = v;
        else if (str_eq(k, "o"))
            fo = v;
        else if (str_eq(k, "id"))
            fid = v;
        else if (str_eq(k, "userId"))
            fuser = v;
        else if (str_eq(k, "voucherId"))
            fvoucher = v;
        else if (str_eq(k, "ts"))
            fts = v;
        else if (str_eq(k, "ep"))
            fep = v;
    }
    if (fos != NULL)
        return open_many(fos, it, norders, lazy, reason);
    int rc = fo != NULL ? parse_compact(fo, &it->cur, reason)
                        : parse_named(fid, fuser, fvoucher, fts, fep, voucher_id, &it->cur, reason);
    if (rc != 0)
        return -1;
    it->left = *norders = 1;
    return 0;
}

int sentry_open(const redisReply *f, int64_t voucher_id, sentry_it_t *it, size_t *norders,
                const char **reason)
{
    return open_entry(f, voucher_id, it, norders, 0, reason);
}

int sentry_open_lazy(const redisReply *f, int64_t voucher_id, sentry_it_t *it, size_t *bound,
                     const char **reason)
{
    return open_entry(f, voucher_id, it, bound, 1, reason);
}

int sentry_take(sentry_it_t *it, sentry_t *out, const char **reason)
{
    if (!it->lazy)
        return sentry_next(it, out);
    /* What open_many checks, pair by pair, with its reasons: the first pair must be there,
     * and no more pairs than one admission call writes. */
    if (it->p == it->end && it->taken > 0)
        return 0;
    *out = it->cur;
    if (next_num(&it->p, it->end, 0, &out->order_id) != 0) {
        *reason = "missing or bad id";
        return -1;
    }
    if (next_num(&it->p, it->end, 0, &out->user_id) != 0) {
        *reason = "missing or bad userId";
        return -1;
    }
    if (++it->taken > it->left) {
        *reason = "more orders than one admission call writes";
        return -1;
    }
    return 1;
}

int sentry_next(sentry_it_t *it, sentry_t *out)
{
    if (it->left == 0)
        return 0;
    it->left--;
    *out = it->cur;
    if (it->p == NULL)
        return 1;   /* the one order of an o or named entry */
    /* os: checked whole by open_many, so every pair is there and parses */
    out->order_id = checked_num(&it->p, it->end);
    out->user_id = checked_num(&it->p, it->end);
    return 1;
}

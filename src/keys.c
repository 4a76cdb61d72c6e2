/* keys.c -- the names of every Redis key the service uses (see keys.h for the layout).
 *
 * Each function formats one key into the caller's buffer and reports a buffer that is
 * too small as -1 (the buffer then holds an empty string), so a truncated key can never
 * reach Redis. Keys around a number (every admission formats three, and the order index
 * one more) are put together by hand: vsnprintf was a tenth of a worker's CPU per grab. */
#include "keys.h"

#include "rcluster.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "sb.h"

static int key_fmt(char *buf, size_t len, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static int key_fmt(char *buf, size_t len, const char *fmt, ...)
{
    if (buf == NULL || len == 0)
        return -1;
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(buf, len, fmt, ap);
    va_end(ap);
    if (n < 0 || (size_t)n >= len) {
        buf[0] = '\0';
        return -1;
    }
    return n;
}

/* pre, v in decimal, suf: what key_fmt(buf, len, "<pre>%lld<suf>", v) gives. */
static int key_num(char *buf, size_t len, const char *pre, size_t npre, int64_t v,
                   const char *suf, size_t nsuf)
{
    if (buf == NULL || len == 0)
        return -1;
    char num[SB_DEC_MAX];
    size_t nn = (size_t)sb_dec(num, v);
    size_t n = npre + nn + nsuf;
    if (n >= len) {
        buf[0] = '\0';
        return -1;
    }
    memcpy(buf, pre, npre);
    memcpy(buf + npre, num, nn);
    memcpy(buf + npre + nn, suf, nsuf);
    buf[n] = '\0';
    return (int)n;
}

#define KEY_NUM(buf, len, pre, v, suf) \
    key_num(buf, len, pre, sizeof(pre) - 1, v, suf, sizeof(suf) - 1)

int key_voucher(char *buf, size_t len, int64_t voucher_id)
{
    return KEY_NUM(buf, len, "seckill:voucher:{", voucher_id, "}");
}

int key_buyers(char *buf, size_t len, int64_t voucher_id)
{
    return KEY_NUM(buf, len, "seckill:order:{", voucher_id, "}");
}

int key_dead(char *buf, size_t len, int64_t voucher_id)
{
    return KEY_NUM(buf, len, "seckill:dead:{", voucher_id, "}");
}

int key_orders_of(char *buf, size_t len, int64_t user_id)
{
    return KEY_NUM(buf, len, "seckill:orders-of:{u", user_id, "}");
}

int key_stream(char *buf, size_t len, int64_t voucher_id)
{
    return KEY_NUM(buf, len, "seckill:stream:{", voucher_id, "}");
}

int key_rebuild_lock(char *buf, size_t len, int64_t voucher_id)
{
    return KEY_NUM(buf, len, "seckill:rebuild:{", voucher_id, "}");
}

int key_rebuild_buyers(char *buf, size_t len, int64_t voucher_id)
{
    return KEY_NUM(buf, len, "seckill:rebuild:buyers:{", voucher_id, "}");
}

/* ---- stock buckets */

#define BTAG_WINDOW 32u      /* slots after the target a bucket's tag may land in */
#define BTAG_SALTS 65536u

/* Bucket b's target: a b/K turn of the slot ring after bucket 0's slot. On a cluster
 * whose masters own equal runs of slots, K buckets then land on min(K, masters)
 * different masters (one per master for K = masters), whatever bucket 0's slot is, unless
 * a target falls within BTAG_WINDOW slots before a master's boundary. */
unsigned key_bsalt(int64_t voucher_id, int bucket, int nbuckets)
{
    char tag[48];
    if (bucket <= 0 || nbuckets < 2 || bucket >= nbuckets)
        return 0;
    int n = snprintf(tag, sizeof tag, "%lld", (long long)voucher_id);
    unsigned slot0 = rcl_slot(tag, (size_t)n);
    unsigned target = (slot0 + ((unsigned)bucket * RCL_SLOTS + (unsigned)nbuckets / 2) /
                               (unsigned)nbuckets) % RCL_SLOTS;
    for (unsigned s = 0; s < BTAG_SALTS; s++) {
        n = snprintf(tag, sizeof tag, "%lld.b%d.%u", (long long)voucher_id, bucket, s);
        unsigned slot = rcl_slot(tag, (size_t)n);
        if (((slot + RCL_SLOTS - target) % RCL_SLOTS) < BTAG_WINDOW)
            return s;
    }
    return 0;   /* never seen: 2^16 salts all missed a 32-slot window */
}

int key_btag_salt(char *buf, size_t len, int64_t voucher_id, int bucket, unsigned salt)
{
    if (bucket <= 0)
        return key_fmt(buf, len, "%lld", (long long)voucher_id);
    return key_fmt(buf, len, "%lld.b%d.%u", (long long)voucher_id, bucket, salt);
}

int key_btag(char *buf, size_t len, int64_t voucher_id, int bucket, int nbuckets)
{
    if (bucket < 0 || (bucket > 0 && (nbuckets < 2 || nbuckets > KEY_BUCKETS_MAX ||
                                      bucket >= nbuckets))) {
        if (buf != NULL && len > 0)
            buf[0] = '\0';
        return -1;
    }
    return key_btag_salt(buf, len, voucher_id, bucket,
                         key_bsalt(voucher_id, bucket, nbuckets));
}

int key_voucher_t(char *buf, size_t len, const char *tag)
{
    return key_fmt(buf, len, "seckill:voucher:{%s}", tag);
}

int key_buyers_t(char *buf, size_t len, const char *tag)
{
    return key_fmt(buf, len, "seckill:order:{%s}", tag);
}

int key_stream_t(char *buf, size_t len, const char *tag)
{
    return key_fmt(buf, len, "seckill:stream:{%s}", tag);
}

int key_dead_t(char *buf, size_t len, const char *tag)
{
    return key_fmt(buf, len, "seckill:dead:{%s}", tag);
}

int key_xfer_log(char *buf, size_t len, const char *tag)
{
    return key_fmt(buf, len, "seckill:xfer:{%s}", tag);
}

int key_xfer_applied(char *buf, size_t len, const char *tag)
{
    return key_fmt(buf, len, "seckill:xfer:applied:{%s}", tag);
}

int key_login_code(char *buf, size_t len, const char *phone)
{
    if (phone == NULL)
        return -1;
    return key_fmt(buf, len, "login:code:%s", phone);
}

int key_login_fails(char *buf, size_t len, const char *phone)
{
    if (phone == NULL)
        return -1;
    return key_fmt(buf, len, "{login:code:%s}:fails", phone);
}

int key_login_token(char *buf, size_t len, const char *token)
{
    if (token == NULL)
        return -1;
    return key_fmt(buf, len, "login:token:%s", token);
}

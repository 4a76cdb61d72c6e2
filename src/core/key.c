/* keys.c -- the names of every Redis key the service uses (see keys.h for the layout).
 *
 * Each function formats one key into the caller's buffer and reports a buffer that is
 * too small as -1 (the buffer then holds an empty string), so a truncated key can never
 * reach Redis. Keys are put together by hand (memcpy, sb_dec), not by snprintf: every
 * admission formats three or four, and vsnprintf was a tenth of a worker's CPU per grab. */
#include "core/key.h"

#include "redis/rcluster.h"

#include <stdio.h>
#include <string.h>

#include "core/sb.h"

/* pre, v in decimal, suf: what snprintf(buf, len, "<pre>%lld<suf>", v) gives, or -1. */
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

/* pre, the string z, suf: what snprintf(buf, len, "<pre>%s<suf>", z) gives, or -1. A
 * NULL z is refused (-1, empty buffer) rather than spelled "(null)". */
static int key_str(char *buf, size_t len, const char *pre, size_t npre, const char *z,
                   const char *suf, size_t nsuf)
{
    if (buf == NULL || len == 0)
        return -1;
    size_t nz = z != NULL ? strlen(z) : 0;
    size_t n = npre + nz + nsuf;
    if (z == NULL || n >= len) {
        buf[0] = '\0';
        return -1;
    }
    memcpy(buf, pre, npre);
    memcpy(buf + npre, z, nz);
    memcpy(buf + npre + nz, suf, nsuf);
    buf[n] = '\0';
    return (int)n;
}

#define KEY_STR(buf, len, pre, z, suf) \
    key_str(buf, len, pre, sizeof(pre) - 1, z, suf, sizeof(suf) - 1)

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

int key_room(char *buf, size_t len, int64_t voucher_id)
{
    return KEY_NUM(buf, len, "seckill:room:{", voucher_id, "}");
}

int key_room_issued(char *buf, size_t len, int64_t voucher_id)
{
    return KEY_NUM(buf, len, "seckill:room:issued:{", voucher_id, "}");
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
    unsigned slot0 = rcluster_slot(tag, (size_t)n);
    unsigned target = (slot0 + ((unsigned)bucket * RCL_SLOTS + (unsigned)nbuckets / 2) /
                               (unsigned)nbuckets) % RCL_SLOTS;
    for (unsigned s = 0; s < BTAG_SALTS; s++) {
        n = snprintf(tag, sizeof tag, "%lld.b%d.%u", (long long)voucher_id, bucket, s);
        unsigned slot = rcluster_slot(tag, (size_t)n);
        if (((slot + RCL_SLOTS - target) % RCL_SLOTS) < BTAG_WINDOW)
            return s;
    }
    return 0;   /* never seen: 2^16 salts all missed a 32-slot window */
}

int key_btag_salt(char *buf, size_t len, int64_t voucher_id, int bucket, unsigned salt)
{
    if (bucket <= 0)
        return KEY_NUM(buf, len, "", voucher_id, "");
    /* "<voucher>.b<bucket>.<salt>" */
    char v[SB_DEC_MAX], b[SB_DEC_MAX + 2] = ".b";
    sb_dec(v, voucher_id);
    sb_dec(b + 2, bucket);
    char tail[SB_DEC_MAX + 1] = ".";
    sb_dec(tail + 1, (int64_t)salt);
    size_t nv = strlen(v), nb = strlen(b), nt = strlen(tail);
    if (buf == NULL || len == 0)
        return -1;
    if (nv + nb + nt >= len) {
        buf[0] = '\0';
        return -1;
    }
    memcpy(buf, v, nv);
    memcpy(buf + nv, b, nb);
    memcpy(buf + nv + nb, tail, nt + 1);
    return (int)(nv + nb + nt);
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
    return KEY_STR(buf, len, "seckill:voucher:{", tag, "}");
}

int key_rebuild_lock_t(char *buf, size_t len, const char *tag)
{
    return KEY_STR(buf, len, "seckill:rebuild:{", tag, "}");
}

int key_rebuild_buyers_t(char *buf, size_t len, const char *tag)
{
    return KEY_STR(buf, len, "seckill:rebuild:buyers:{", tag, "}");
}

int key_rebuild_ostate_t(char *buf, size_t len, const char *tag)
{
    return KEY_STR(buf, len, "seckill:rebuild:ostate:{", tag, "}");
}

int key_buyers_t(char *buf, size_t len, const char *tag)
{
    return KEY_STR(buf, len, "seckill:order:{", tag, "}");
}

int key_stream_t(char *buf, size_t len, const char *tag)
{
    return KEY_STR(buf, len, "seckill:stream:{", tag, "}");
}

int key_dead_t(char *buf, size_t len, const char *tag)
{
    return KEY_STR(buf, len, "seckill:dead:{", tag, "}");
}

int key_ostate_t(char *buf, size_t len, const char *tag)
{
    return KEY_STR(buf, len, "seckill:ostate:{", tag, "}");
}

int key_paysweep_t(char *buf, size_t len, const char *tag)
{
    return KEY_STR(buf, len, "seckill:paysweep:{", tag, "}");
}

int key_refunds_t(char *buf, size_t len, const char *tag)
{
    return KEY_STR(buf, len, "seckill:refunds:{", tag, "}");
}

int key_payid(char *buf, size_t len, const char *payment_id)
{
    if (payment_id == NULL)
        return -1;
    return KEY_STR(buf, len, "seckill:payid:", payment_id, "");
}

int key_xfer_log(char *buf, size_t len, const char *tag)
{
    return KEY_STR(buf, len, "seckill:xfer:{", tag, "}");
}

int key_xfer_applied(char *buf, size_t len, const char *tag)
{
    return KEY_STR(buf, len, "seckill:xfer:applied:{", tag, "}");
}

int key_bmember(char *buf, size_t len, char *ks, size_t kslen, int64_t voucher_id, int bucket,
                int nbuckets)
{
    char tag[48];
    if (bucket < 0 || (bucket > 0 && (nbuckets < 2 || nbuckets > KEY_BUCKETS_MAX ||
                                      bucket >= nbuckets)))
        return -1;
    /* key_btag searches the salt: only when the stream key is asked for */
    if (ks != NULL && (key_btag(tag, sizeof tag, voucher_id, bucket, nbuckets) < 0 ||
                       key_stream_t(ks, kslen, tag) < 0))
        return -1;
    int n = bucket == 0 ? KEY_NUM(buf, len, "", voucher_id, "")
                        : snprintf(buf, len, "%lld.%d.%d", (long long)voucher_id, bucket, nbuckets);
    return n < 0 || (size_t)n >= len ? -1 : n;
}

int key_bmember_parse(const char *z, size_t n, int64_t *voucher_id, int *bucket, int *nbuckets)
{
    char buf[64];
    long long v;
    int b, k, used = 0;
    if (n >= sizeof buf)
        return -1;
    memcpy(buf, z, n);
    buf[n] = '\0';
    if (sscanf(buf, "%lld.%d.%d%n", &v, &b, &k, &used) != 3 || (size_t)used != n || v <= 0 ||
        k < 2 || k > KEY_BUCKETS_MAX || b < 1 || b >= k)
        return -1;
    *voucher_id = v;
    *bucket = b;
    *nbuckets = k;
    return 0;
}

int key_login_code(char *buf, size_t len, const char *phone)
{
    if (phone == NULL)
        return -1;
    return KEY_STR(buf, len, "login:code:", phone, "");
}

int key_login_fails(char *buf, size_t len, const char *phone)
{
    if (phone == NULL)
        return -1;
    return KEY_STR(buf, len, "{login:code:", phone, "}:fails");
}

int key_login_guess(char *buf, size_t len, const char *phone)
{
    if (phone == NULL)
        return -1;
    return KEY_STR(buf, len, "{login:code:", phone, "}:guess");
}

int key_login_sent(char *buf, size_t len, const char *phone)
{
    if (phone == NULL)
        return -1;
    return KEY_STR(buf, len, "{login:code:", phone, "}:sent");
}

int key_login_token(char *buf, size_t len, const char *token)
{
    if (token == NULL)
        return -1;
    return KEY_STR(buf, len, "login:token:", token, "");
}

int key_cache_shop(char *buf, size_t len, int64_t shop_id)
{
    return KEY_NUM(buf, len, "cache:shop:", shop_id, "");
}

int key_lock_shop(char *buf, size_t len, int64_t shop_id)
{
    return KEY_NUM(buf, len, "lock:shop:", shop_id, "");
}

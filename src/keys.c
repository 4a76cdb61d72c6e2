/* keys.c -- the names of every Redis key the service uses (see keys.h for the layout).
 *
 * Each function formats one key into the caller's buffer with snprintf and reports a
 * buffer that is too small as -1 (the buffer then holds an empty string), so a truncated
 * key can never reach Redis. */
#include "keys.h"

#include <stdarg.h>
#include <stdio.h>

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

int key_voucher(char *buf, size_t len, int64_t voucher_id)
{
    return key_fmt(buf, len, "seckill:voucher:{%lld}", (long long)voucher_id);
}

int key_buyers(char *buf, size_t len, int64_t voucher_id)
{
    return key_fmt(buf, len, "seckill:order:{%lld}", (long long)voucher_id);
}

int key_dead(char *buf, size_t len, int64_t voucher_id)
{
    return key_fmt(buf, len, "seckill:dead:{%lld}", (long long)voucher_id);
}

int key_orders_of(char *buf, size_t len, int64_t user_id)
{
    return key_fmt(buf, len, "seckill:orders-of:{u%lld}", (long long)user_id);
}

int key_stream(char *buf, size_t len, int64_t voucher_id)
{
    return key_fmt(buf, len, "seckill:stream:{%lld}", (long long)voucher_id);
}

int key_rebuild_lock(char *buf, size_t len, int64_t voucher_id)
{
    return key_fmt(buf, len, "seckill:rebuild:{%lld}", (long long)voucher_id);
}

int key_rebuild_buyers(char *buf, size_t len, int64_t voucher_id)
{
    return key_fmt(buf, len, "seckill:rebuild:buyers:{%lld}", (long long)voucher_id);
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

/* resp.c -- a Redis command in RESP (resp.h). */
#include "redis/resp.h"

#include <stdint.h>
#include <string.h>

#include "core/sb.h"

size_t resp_size(int argc, const size_t *lens)
{
    size_t n = 1 + SB_DEC_MAX + 2;
    for (int i = 0; i < argc; i++)
        n += 1 + SB_DEC_MAX + 2 + lens[i] + 2;
    return n;
}

/* "<c><n>\r\n" */
static char *put_head(char *p, char c, int64_t n)
{
    *p++ = c;
    if (n >= 0 && n < 10) {
        *p++ = (char)('0' + n);   /* most lengths: no division at all */
    } else {
        p += sb_dec(p, n);
    }
    *p++ = '\r';
    *p++ = '\n';
    return p;
}

size_t resp_put_head(char *out, int argc)
{
    return (size_t)(put_head(out, '*', argc) - out);
}

size_t resp_put(char *out, int argc, const char *const *argv, const size_t *lens)
{
    size_t n = resp_put_head(out, argc);
    return n + resp_put_args(out + n, argc, argv, lens);
}

size_t resp_put_args(char *out, int argc, const char *const *argv, const size_t *lens)
{
    char *p = out;
    for (int i = 0; i < argc; i++) {
        p = put_head(p, '$', (int64_t)lens[i]);
        if (lens[i] > 0)
            memcpy(p, argv[i], lens[i]);
        p += lens[i];
        *p++ = '\r';
        *p++ = '\n';
    }
    return (size_t)(p - out);
}

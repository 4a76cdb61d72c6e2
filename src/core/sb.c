/* sb.c -- growable byte buffer and the JSON output helpers (see sb.h).
 *
 * Invariant: whenever buf is non-NULL, buf[len] == '\0' (one spare byte is always
 * reserved), so sb_cstr() never has to grow and a buffer can be handed to C string
 * functions at any time. Out of memory aborts (xmem.h), except in sb_try_reserve. */
#include "core/sb.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/log.h"
#include "core/xmem.h"

/* reserve()'s growth: out of line, so that the common case (it fits) inlines. */
static void grow(sb_t *s, size_t n)
{
    if (n >= SIZE_MAX / 2 - s->len) {
        log_error("out of memory (a buffer of %zu + %zu bytes)", s->len, n);
        abort();
    }
    size_t need = s->len + n + 1;
    if (need <= s->cap)
        return;
    size_t cap = s->cap ? s->cap : 64;
    while (cap < need)
        cap *= 2;
    char *p = xrealloc(s->borrowed ? NULL : s->buf, cap);
    if (s->borrowed)
        memcpy(p, s->buf, s->len + 1);
    s->borrowed = 0;
    s->buf = p;
    s->cap = cap;
}

/* Makes room for n more bytes plus the terminating NUL. */
static inline void reserve(sb_t *s, size_t n)
{
    if (!sb_fits(s, n))
        grow(s, n);
}

char *sb_reserve(sb_t *s, size_t n)
{
    reserve(s, n);
    return s->buf + s->len;
}

void sb_init_on(sb_t *s, char *buf, size_t cap)
{
    s->buf = buf;
    s->len = 0;
    s->cap = cap;
    s->borrowed = 1;
    buf[0] = '\0';
}

size_t sb_cap_grown(const sb_t *s, size_t n)
{
    if (n >= SIZE_MAX / 2 - s->len)
        return SIZE_MAX;
    size_t need = s->len + n + 1;
    if (need <= s->cap)
        return s->cap;
    size_t cap = s->cap ? s->cap : 64;
    while (cap < need)
        cap *= 2;
    return cap;
}

/* Grows s to cap bytes without aborting: 0, or -1 if realloc failed (s unchanged). */
static int try_grow_to(sb_t *s, size_t cap)
{
    char *p = realloc(s->borrowed ? NULL : s->buf, cap);
    if (!p)
        return -1;
    if (s->borrowed)
        memcpy(p, s->buf, s->len + 1);
    else if (!s->buf)
        p[0] = '\0';
    s->borrowed = 0;
    s->buf = p;
    s->cap = cap;
    return 0;
}

int sb_try_reserve_exact(sb_t *s, size_t n)
{
    if (n >= SIZE_MAX / 2 - s->len)
        return -1;
    size_t need = s->len + n + 1;
    return need <= s->cap ? 0 : try_grow_to(s, need);
}

int sb_try_reserve(sb_t *s, size_t n)
{
    size_t cap = sb_cap_for(s, n);
    if (cap == SIZE_MAX)
        return -1;
    return cap == s->cap ? 0 : try_grow_to(s, cap);
}

void sb_free(sb_t *s)
{
    if (!s->borrowed)
        free(s->buf);
    s->buf = NULL;
    s->len = 0;
    s->cap = 0;
    s->borrowed = 0;
}

void sb_append(sb_t *s, const void *p, size_t n)
{
    if (n == 0)
        return;
    reserve(s, n);
    memcpy(s->buf + s->len, p, n);
    s->len += n;
    s->buf[s->len] = '\0';
}

void sb_puts(sb_t *s, const char *z)
{
    sb_append(s, z, strlen(z));
}

void sb_printf(sb_t *s, const char *fmt, ...)
{
    va_list ap;
    reserve(s, 64);
    va_start(ap, fmt);
    int n = vsnprintf(s->buf + s->len, s->cap - s->len, fmt, ap);
    va_end(ap);
    if (n < 0) {             /* encoding error: append nothing, keep the NUL */
        s->buf[s->len] = '\0';
        return;
    }
    if ((size_t)n >= s->cap - s->len) {
        reserve(s, (size_t)n);
        va_start(ap, fmt);
        vsnprintf(s->buf + s->len, s->cap - s->len, fmt, ap);
        va_end(ap);
    }
    s->len += (size_t)n;
}

/* Two digits at a time: halves the divisions of the naive loop. */
static const char digit_pairs[201] =
    "00010203040506070809101112131415161718192021222324252627282930313233343536373839"
    "40414243444546474849505152535455565758596061626364656667686970717273747576777879"
    "8081828384858687888990919293949596979899";

int sb_parse_pos(const char *z, size_t n, int64_t *out)
{
    if (n == 0 || n > 19) {
        return -1;
    }
    uint64_t v = 0;
    for (size_t i = 0; i < n; i++) {
        if (z[i] < '0' || z[i] > '9') {
            return -1;
        }
        v = v * 10 + (uint64_t)(z[i] - '0');
    }
    if (v == 0 || v > (uint64_t)INT64_MAX) {
        return -1;
    }
    *out = (int64_t)v;
    return 0;
}

/* Decimal digits of u: an estimate from its bit length (log10(2) ~ 1233/4096), corrected
 * by one compare. */
static int dec_digits(uint64_t u)
{
    static const uint64_t pow10[20] = {
        0, 10ull, 100ull, 1000ull, 10000ull, 100000ull, 1000000ull, 10000000ull,
        100000000ull, 1000000000ull, 10000000000ull, 100000000000ull, 1000000000000ull,
        10000000000000ull, 100000000000000ull, 1000000000000000ull,
        10000000000000000ull, 100000000000000000ull, 1000000000000000000ull,
        10000000000000000000ull,
    };
    int t = ((64 - __builtin_clzll(u | 1)) * 1233) >> 12;
    return t - (u < pow10[t]) + 1;
}

int sb_dec(char *out, int64_t v)
{
    /* Work on the magnitude as unsigned so INT64_MIN does not overflow. Written from the
     * last digit backwards straight into out, its length known first, four digits per
     * 64-bit division: the order ids of the grab's hot path are 19 digits, and the copy
     * from a scratch buffer and a division per two digits cost more than the digits. */
    uint64_t u = v < 0 ? (uint64_t)0 - (uint64_t)v : (uint64_t)v;
    if (v >= 0 && u < 100) {   /* most RESP lengths and Content-Lengths: no counting */
        if (u < 10) {
            out[0] = (char)('0' + u);
            out[1] = '\0';
            return 1;
        }
        memcpy(out, digit_pairs + 2 * u, 2);
        out[2] = '\0';
        return 2;
    }
    int n = (v < 0) + dec_digits(u);
    char *p = out + n;
    *p = '\0';
    while (u >= 10000) {
        unsigned r = (unsigned)(u % 10000);
        u /= 10000;
        p -= 4;
        memcpy(p, digit_pairs + 2 * (r / 100), 2);
        memcpy(p + 2, digit_pairs + 2 * (r % 100), 2);
    }
    if (u >= 100) {
        unsigned i = (unsigned)(u % 100) * 2;
        u /= 100;
        p -= 2;
        memcpy(p, digit_pairs + i, 2);
    }
    if (u >= 10) {
        p -= 2;
        memcpy(p, digit_pairs + 2 * u, 2);
    } else {
        *--p = (char)('0' + u);
    }
    if (v < 0)
        *--p = '-';
    return n;
}

void sb_i64(sb_t *s, int64_t v)
{
    char tmp[SB_DEC_MAX];
    sb_append(s, tmp, (size_t)sb_dec(tmp, v));
}

const char *sb_cstr(sb_t *s)
{
    if (!s->buf)
        return "";
    return s->buf;           /* the invariant keeps buf[len] == '\0' */
}

size_t sb_utf8_len(const char *z, size_t n)
{
    const unsigned char *p = (const unsigned char *)z;
    if (n == 0)
        return 0;
    if (p[0] < 0x80)
        return 1;
    size_t k;
    unsigned lo = 0x80, hi = 0xBF;   /* the allowed range of the second byte */
    if (p[0] >= 0xC2 && p[0] <= 0xDF) {
        k = 2;
    } else if (p[0] >= 0xE0 && p[0] <= 0xEF) {
        k = 3;
        if (p[0] == 0xE0)
            lo = 0xA0;               /* no overlong forms */
        else if (p[0] == 0xED)
            hi = 0x9F;               /* no surrogates */
    } else if (p[0] >= 0xF0 && p[0] <= 0xF4) {
        k = 4;
        if (p[0] == 0xF0)
            lo = 0x90;
        else if (p[0] == 0xF4)
            hi = 0x8F;               /* nothing above U+10FFFF */
    } else {
        return 0;                    /* 0x80..0xC1, 0xF5..0xFF */
    }
    if (n < k || p[1] < lo || p[1] > hi)
        return 0;
    for (size_t i = 2; i < k; i++)
        if ((p[i] & 0xC0) != 0x80)
            return 0;
    return k;
}

void sb_json_str(sb_t *s, const char *z, size_t n)
{
    static const char hex[] = "0123456789abcdef";
    reserve(s, n + 2);
    s->buf[s->len++] = '"';
    size_t run = 0;          /* start of the pending run of bytes that need no escape */
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)z[i];
        if (ch >= 0x80) {
            size_t k = sb_utf8_len(z + i, n - i);
            if (k > 0) {
                i += k - 1;          /* a whole valid character: keep it as it is */
                continue;
            }
            sb_append(s, z + run, i - run);
            run = i + 1;
            sb_append(s, "\xEF\xBF\xBD", 3);   /* U+FFFD for the bad byte */
            continue;
        }
        if (ch >= 0x20 && ch != '"' && ch != '\\')
            continue;
        sb_append(s, z + run, i - run);
        run = i + 1;
        char esc[6] = {'\\', 0, 0, 0, 0, 0};
        size_t elen = 2;
        switch (ch) {
        case '"': esc[1] = '"'; break;
        case '\\': esc[1] = '\\'; break;
        case '\n': esc[1] = 'n'; break;
        case '\r': esc[1] = 'r'; break;
        case '\t': esc[1] = 't'; break;
        case '\b': esc[1] = 'b'; break;
        case '\f': esc[1] = 'f'; break;
        default:
            esc[1] = 'u';
            esc[2] = '0';
            esc[3] = '0';
            esc[4] = hex[ch >> 4];
            esc[5] = hex[ch & 15];
            elen = 6;
        }
        sb_append(s, esc, elen);
    }
    sb_append(s, z + run, n - run);
    sb_append(s, "\"", 1);
}

void sb_json_datetime(sb_t *s, int64_t t)
{
    struct tm tm;
    time_t tt = (time_t)t;
    if (!localtime_r(&tt, &tm)) {
        sb_puts(s, "null");   /* only for absurd values; never produced by our own data */
        return;
    }
    /* A 4-digit year keeps the advertised format; wider years would not round-trip. */
    sb_printf(s, "\"%04d-%02d-%02dT%02d:%02d:%02d\"", tm.tm_year + 1900, tm.tm_mon + 1,
              tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec);
}

static int digits(const char *z, int n, int *out)
{
    int v = 0;
    for (int i = 0; i < n; i++) {
        if (z[i] < '0' || z[i] > '9')
            return -1;
        v = v * 10 + (z[i] - '0');
    }
    *out = v;
    return 0;
}

static int days_in_month(int year, int month)
{
    static const int days[12] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
    if (month == 2 && ((year % 4 == 0 && year % 100 != 0) || year % 400 == 0))
        return 29;
    return days[month - 1];
}

int sb_datetime_parse(const char *z, int64_t *out)
{
    /* Exactly "yyyy-MM-ddTHH:mm:ss": 19 characters, nothing before or after. */
    if (!z || strlen(z) != 19)
        return -1;
    if (z[4] != '-' || z[7] != '-' || z[10] != 'T' || z[13] != ':' || z[16] != ':')
        return -1;
    int year, mon, day, hour, min, sec;
    if (digits(z, 4, &year) || digits(z + 5, 2, &mon) || digits(z + 8, 2, &day) ||
        digits(z + 11, 2, &hour) || digits(z + 14, 2, &min) || digits(z + 17, 2, &sec))
        return -1;
    /* mktime would silently normalise 2024-02-30 into March: reject instead. Leap
     * seconds (":60") are rejected too. Years before 1970 are not sale windows. */
    if (year < 1970 || mon < 1 || mon > 12 || day < 1 || day > days_in_month(year, mon) ||
        hour > 23 || min > 59 || sec > 59)
        return -1;

    struct tm tm;
    memset(&tm, 0, sizeof tm);
    tm.tm_year = year - 1900;
    tm.tm_mon = mon - 1;
    tm.tm_mday = day;
    tm.tm_hour = hour;
    tm.tm_min = min;
    tm.tm_sec = sec;
    tm.tm_isdst = -1;        /* let the zone rules decide whether DST applies */
    tm.tm_wday = -1;         /* mktime sets it on success: tells a real -1 from failure */
    time_t t = mktime(&tm);
    if (t == (time_t)-1 && tm.tm_wday == -1)
        return -1;
    /* A wall time inside a DST gap (e.g. 02:30 on the spring-forward night) does not
     * exist; mktime moves it by an hour. Refuse it rather than store a different time. */
    if (tm.tm_hour != hour || tm.tm_min != min || tm.tm_mday != day)
        return -1;
    *out = (int64_t)t;
    return 0;
}

/* sb.h -- a growable byte buffer, and the JSON writing the API replies are made of.
 *
 * Replies are built by appending, not through a DOM: the hot path writes a handful of
 * fields and a tree would cost allocations for nothing. Request bodies are *parsed* with
 * jansson (see api.h); only output goes through here.
 *
 * Ownership: an sb_t owns its buffer; sb_free() releases it and leaves an empty buffer.
 * Out of memory aborts the process (our OOM policy, see docs/design.md). */
#ifndef SECKILL_SB_H
#define SECKILL_SB_H

#include <stddef.h>
#include <stdint.h>

typedef struct sb {
    char *buf;      /* NUL-terminated when len > 0 or after sb_cstr() */
    size_t len;
    size_t cap;
    int borrowed;   /* buf is the caller's (sb_init_on), not ours to free */
} sb_t;

#define SB_INIT {NULL, 0, 0, 0}

/* Starts s on the caller's buffer buf (cap > 0 bytes, e.g. on the stack), which s never
 * frees; s moves to the heap only if it must grow past cap. Still call sb_free(). */
void sb_init_on(sb_t *s, char *buf, size_t cap);

void sb_free(sb_t *s);
/* len = 0, keeps the memory. Inline: every reply empties the request's buffers. */
static inline void sb_reset(sb_t *s)
{
    s->len = 0;
    if (s->buf)
        s->buf[0] = '\0';
}
void sb_append(sb_t *s, const void *p, size_t n);
void sb_puts(sb_t *s, const char *z);
void sb_printf(sb_t *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void sb_i64(sb_t *s, int64_t v);

/* v in decimal ("%lld") into out, which holds SB_DEC_MAX bytes, NUL-terminated; returns
 * the length. For the hot path: snprintf costs ~10x more. */
#define SB_DEC_MAX 21
int sb_dec(char *out, int64_t v);
/* The strict inverse for ids read from Redis: the n bytes at z are 1..19 digits (no sign,
 * no space) of a value in 1..INT64_MAX. 0 and *out, or -1. */
int sb_parse_pos(const char *z, size_t n, int64_t *out);
const char *sb_cstr(sb_t *s);                 /* always NUL-terminated, never NULL */
/* Makes room for n more bytes (and the NUL) and returns where they go: the caller writes
 * up to n bytes there, then sets len and the NUL itself. */
char *sb_reserve(sb_t *s, size_t n);

/* Whether n more bytes and the NUL fit as s is. cap > len whenever buf is set (the NUL's
 * byte), so cap - len > n cannot overflow and means len + n + 1 <= cap. Inline: most
 * appends fit, and then making room costs one compare. */
static inline int sb_fits(const sb_t *s, size_t n)
{
    return s->buf != NULL && s->cap - s->len > n;
}

/* For callers that must not abort on out of memory (request buffers, http.c): the
 * capacity s would have after making room for n more bytes (SIZE_MAX if impossible), and
 * the same growth done without aborting (0, or -1 if realloc failed; s is unchanged).
 * sb_cap_grown is sb_cap_for's out-of-line part. */
size_t sb_cap_grown(const sb_t *s, size_t n);
static inline size_t sb_cap_for(const sb_t *s, size_t n)
{
    return sb_fits(s, n) ? s->cap : sb_cap_grown(s, n);
}
int sb_try_reserve(sb_t *s, size_t n);
/* sb_try_reserve without the doubling: room for exactly n more bytes (and the NUL), for
 * a buffer whose final size is known (a request body of a given Content-Length). */
int sb_try_reserve_exact(sb_t *s, size_t n);

/* Appends z (n bytes, UTF-8 passed through) as a quoted JSON string, escaping
 * quotes, backslashes and control characters. A byte that does not start a valid UTF-8
 * sequence becomes U+FFFD, so the output is valid JSON whatever z holds (fuzz_redis_reply
 * found a nickName from Redis that was not). */
void sb_json_str(sb_t *s, const char *z, size_t n);

/* Length (1..4) of the valid UTF-8 sequence at z[0..n), or 0 if z does not start with
 * one: a stray continuation byte, an overlong form, a surrogate, a code point above
 * U+10FFFF, or a sequence cut short. n == 0 gives 0. */
size_t sb_utf8_len(const char *z, size_t n);

/* Local date-time "yyyy-MM-ddTHH:mm:ss" (server time zone) for epoch seconds t, quoted. */
void sb_json_datetime(sb_t *s, int64_t t);

/* Parses "yyyy-MM-ddTHH:mm:ss" (local time; a fraction ".SSS" and a trailing 'Z' are not
 * accepted) into epoch seconds. Returns 0 on success, -1 on anything else. */
int sb_datetime_parse(const char *z, int64_t *out);

#endif

/* h1.h -- a strict HTTP/1.1 request parser (RFC 9112): the request head and chunked
 * bodies, nothing else (no I/O, no allocation).
 *
 * Strict where framing is decided, because a proxy in front (nginx) and this server must
 * agree on where every request ends: anything RFC 9112 lets a server reject is rejected.
 * That includes whitespace between a field name and its colon, obs-fold continuation
 * lines, a bare LF or bare CR, a version other than HTTP/1.0 or HTTP/1.1, HTTP/1.1 without
 * exactly one Host, Content-Length together with Transfer-Encoding, a repeated
 * Content-Length (even with the same value), any Transfer-Encoding on HTTP/1.0, a
 * Content-Length that is not 1*DIGIT, a chunk size that is not 1*HEXDIG followed by an
 * extension or CRLF, and anything but CRLF after chunk data. Trailer fields are checked
 * for syntax and then dropped: they never set a request header.
 *
 * Errors are HTTP status codes (400, 413, 414, 431, 501); the caller answers and closes. */
#ifndef SECKILL_H1_H
#define SECKILL_H1_H

#include <stddef.h>
#include <stdint.h>

enum {
    H1_MAX_HEADERS = 100,     /* field lines per head (and per trailer section) */
    H1_MAX_CHUNK_LINE = 1024, /* a chunk-size line with its extensions */
};

typedef struct h1_str {
    const char *p;            /* points into the buffer given to h1_parse_head */
    size_t n;
} h1_str_t;

typedef struct h1_head {
    h1_str_t method, target;
    int minor;                /* HTTP/1.<minor>: 0 or 1 */
    int nheaders;
    uint64_t content_length;  /* valid when has_length; saturates at UINT64_MAX */
    unsigned has_length : 1;
    unsigned chunked : 1;     /* Transfer-Encoding: chunked (the only coding accepted) */
    unsigned conn_close : 1, conn_keep_alive : 1, conn_upgrade : 1; /* Connection options */
    unsigned has_upgrade : 1; /* an Upgrade field */
    unsigned expect_continue : 1;
    unsigned has_auth : 1, has_admin : 1, has_xff : 1, has_pass : 1, has_paysig : 1;
    h1_str_t auth, admin;     /* authorization, x-admin-token: values without OWS */
    h1_str_t pass;            /* x-seckill-pass: a waiting-room pass (src/room/pass.h) */
    h1_str_t paysig;          /* x-pay-signature (POST /pay/notify, src/order/paykey.h) */
    h1_str_t xff;             /* x-forwarded-for (one field line; believed only from a
                               * --trusted-proxy, clientip.h) */
} h1_head_t;

/* Looks for the end of a request head (the empty line) in buf[0..len), resuming at
 * *scan (0 at the start of a head; updated so bytes are looked at once). Returns the
 * head's length including the empty line's CRLF; 0 if more bytes are needed; or minus
 * an HTTP status: -400 for an LF without CR before it, -414 when the request line alone
 * is longer than max, -431 when the head is. */
long h1_head_len(const char *buf, size_t len, size_t *scan, size_t max);

/* Parses a complete head (as measured by h1_head_len). Returns 0, or an HTTP status. */
int h1_parse_head(const char *buf, size_t len, h1_head_t *h);

/* Incremental decoder of a chunked body; zero it (h1_chunked_init) per message. */
typedef struct h1_chunked {
    int state;
    uint64_t left;            /* data bytes of the current chunk still to come */
    uint64_t total;           /* data bytes so far */
    uint64_t max;             /* more than this in total: 413 */
    size_t line;              /* bytes of the current size or trailer line */
    size_t trailer_bytes;     /* the trailer section so far (bounded by max_trailer) */
    size_t max_trailer;
    int digits;
    int ntrailers;
} h1_chunked_t;

void h1_chunked_init(h1_chunked_t *d, uint64_t max_body, size_t max_trailer);

/* Data sink: returns 0, or an HTTP status to stop with (e.g. 503 when out of budget). */
typedef int (*h1_sink_fn)(void *ctx, const char *p, size_t n);

/* Feeds p[0..n). Sets *used to the bytes consumed. Returns 0 when all was consumed and
 * the body is not complete; 1 when the body (with its trailer section) ended after
 * *used bytes; or an HTTP status (400, 413, 431, or what sink returned). */
int h1_chunked_feed(h1_chunked_t *d, const char *p, size_t n, size_t *used, h1_sink_fn sink,
                    void *ctx);

#endif

/* http_req.h -- a request as its handler sees it (http.h serves it, http_reply answers).
 *
 * Apart from http.h so that the code a handler calls into (sale/, auth/) can read the
 * request it is given without depending on the HTTP server itself. */
#ifndef SECKILL_HTTP_REQ_H
#define SECKILL_HTTP_REQ_H

#include <stddef.h>
#include <stdint.h>

struct worker;

enum { HM_GET = 1, HM_POST, HM_PUT, HM_DELETE, HM_HEAD, HM_OTHER };

/* The public listener (--listen), or worker 0's metrics listener (--metrics-listen). */
enum { HTTP_LISTENER_PUBLIC = 0, HTTP_LISTENER_METRICS = 1 };

typedef struct http_req {
    /* read-only for handlers; valid from the handler call until http_reply() returns */
    struct worker *w;
    int method;                 /* HM_* */
    const char *path;           /* raw (not percent-decoded), NUL-terminated, no query, /api prefix removed */
    size_t path_len;
    const char *query;          /* raw query string after '?', NUL-terminated, "" if none */
    const char *authorization;  /* "authorization" header value, NULL if absent */
    const char *admin_token;    /* "x-admin-token" header value, NULL if absent */
    const char *pay_signature;  /* "x-pay-signature" header value, NULL if absent */
    const char *body;           /* NUL-terminated (a NUL is added after the body) */
    size_t body_len;
    uint64_t start_ns;          /* clock_now_ns() of the wake-up that completed it */
    const char *peer;           /* TCP peer's address as text, e.g. "127.0.0.1" */
    const char *forwarded_for;  /* raw "x-forwarded-for" value, NULL if absent: trust it
                                 * only through clientip.h */
    const char *pass;           /* "x-seckill-pass" header value, NULL if absent or empty */
    size_t pass_len;
    int listener;               /* HTTP_LISTENER_*: which socket the request came in on */
    void *ctx;                  /* free for the handler's use */
    int retry_after_s;          /* set by the handler before http_reply: > 0 adds
                                 * "Retry-After: N" (a 429's wait, in seconds) */
} http_req_t;

#endif

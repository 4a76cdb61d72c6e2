/* http.h -- the HTTP/1.1 front end: listening sockets, connections, parsing, replies.
 *
 * Each worker accepts on its own SO_REUSEPORT socket and parses strictly (h1.h, RFC 9112)
 * on raw non-blocking sockets driven by the worker's libevent loop.
 * Keep-alive and pipelining are supported: requests on one connection are handled one at
 * a time, in order, so replies leave in request order. Limits (config.h): request line +
 * headers, body, header count, idle and header timeouts, connections per worker and per
 * client address, request bytes held by the whole process.
 *
 * The http layer makes no business decisions: for each complete request it calls the
 * one handler given to http_worker_init (the router, api.h), which must call
 * http_reply() exactly once -- right away or later from a Redis/SQL callback on the same
 * worker thread. */
#ifndef SECKILL_HTTP_H
#define SECKILL_HTTP_H

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
    const char *body;           /* NUL-terminated (a NUL is added after the body) */
    size_t body_len;
    uint64_t start_ns;          /* clock_mono_ns() when the request was complete */
    const char *peer;           /* TCP peer's address as text, e.g. "127.0.0.1" */
    const char *forwarded_for;  /* raw "x-forwarded-for" value, NULL if absent: trust it
                                 * only through clientip.h */
    int listener;               /* HTTP_LISTENER_*: which socket the request came in on */
    void *ctx;                  /* free for the handler's use */
    int retry_after_s;          /* set by the handler before http_reply: > 0 adds
                                 * "Retry-After: N" (a 429's wait, in seconds) */
} http_req_t;

typedef void (*http_handler_fn)(http_req_t *r);

/* Creates w->http and starts listening on host:port with SO_REUSEPORT. Returns 0, or -1
 * with a message in err (e.g. port in use). */
int http_worker_init(struct worker *w, const char *host, int port, http_handler_fn handler,
                     char *err, size_t errlen);

/* Sends the reply and ends the request. body is copied; content_type NULL means
 * "application/json;charset=UTF-8". status 401 with len 0 gives an empty body. After this
 * returns, r must not be touched. If the client has gone away meanwhile, the reply is
 * dropped silently (the handler need not know). */
void http_reply(http_req_t *r, int status, const char *content_type, const char *body, size_t len);

/* The clocks for r's handler, without a clock read on the hot path: while r is handled
 * inside the loop callback that read it (the answer is then synchronous), the reading
 * that callback took at its start, microseconds old, stands for now; otherwise (a
 * handler continuing from a Redis or SQL callback) the clock is read.
 *   http_clock_ns: clock_mono_ns(), for latencies and cache ages.
 *   http_wall_ms: clock_wall_ms(), derived from the monotonic reading and an offset
 *     re-read every second, so a step of the wall clock shows within a second. */
uint64_t http_clock_ns(const http_req_t *r);
uint64_t http_wall_ms(const http_req_t *r);

/* Brackets a loop callback outside http.c that may answer several requests (a Redis
 * reply answering an admission batch): begin reads the clock once, and until end it
 * stands for now for every request answered in between, as inside http.c's own
 * callbacks (the clocks above, and the replies sent). Nests; w without http is fine. */
void http_callback_begin(struct worker *w);
void http_callback_end(struct worker *w);

/* Graceful stop, on the worker's thread: close the listener, close idle connections,
 * let in-flight requests finish; calls done(w) once no connection remains or after
 * grace_ms (then the rest are closed). */
void http_worker_stop(struct worker *w, int grace_ms, void (*done)(struct worker *w));

/* Start-up: the listener stays closed (connections wait in the kernel's backlog, none is
 * refused) until http_worker_open_accept, or at most max_ms (then it opens anyway, with
 * a warning), so a worker answers nothing before it can reach Redis. hold: before the
 * worker's thread starts; open: on the worker's thread. */
void http_worker_hold_accept(struct worker *w, int max_ms);
void http_worker_open_accept(struct worker *w);
void http_worker_free(struct worker *w);

/* Connections currently open on this worker (for /metrics). */
/* Safe to call from any thread (a relaxed atomic read). */
int http_worker_conns(const struct worker *w);

/* Finds the value of key in a raw query string ("a=1&phone=138..."), percent-decoding it
 * into out. Returns the decoded length, or -1 if absent or longer than outlen-1. */
int http_query_get(const char *query, const char *key, char *out, size_t outlen);

#endif

/* http.h -- the HTTP/1.1 front end: listening sockets, connections, parsing, replies.
 *
 * Each worker accepts on its own SO_REUSEPORT socket and parses strictly (h1.h, RFC 9112)
 * on raw non-blocking sockets driven by the worker's libevent loop.
 * Keep-alive and pipelining are supported: requests on one connection are handled one at
 * a time, in order, so replies leave in request order. Limits (config.h): request line +
 * headers, body (per route, bodylimit.h) and its rate, header count, idle, header and
 * write timeouts, connections per worker and per client address (IPv6: per /64), request
 * bytes held by the whole process and by each client address, the send buffer.
 *
 * The http layer makes no business decisions: for each complete request it calls the
 * one handler given to http_worker_init (the router, api.h), which must call
 * http_reply() exactly once -- right away or later from a Redis/SQL callback on the same
 * worker thread. */
#ifndef SECKILL_HTTP_H
#define SECKILL_HTTP_H

#include <stddef.h>
#include <stdint.h>

#include "http/http_req.h"

struct worker;

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

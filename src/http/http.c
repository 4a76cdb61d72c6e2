/* http.c -- the HTTP/1.1 front end of one worker (see http.h).
 *
 * Each worker owns a SO_REUSEPORT listening socket and its connections; with connections
 * steered by CPU (--steer-connections, the default) an idle one may move to another
 * worker (steer.h; "Hand-offs" below). Sockets are raw and non-blocking, driven by plain
 * libevent events on the worker's loop (no evhttp, no bufferevents: they cost about twice
 * the CPU per request).
 * h1.c parses strictly (RFC 9112: a proxy in front and we must agree on where each
 * request ends); the fields we need (URL, two headers, body) are copied into
 * per-connection buffers, so bytes are read into one per-worker scratch buffer and only
 * what cannot be parsed yet (an incomplete head, pipelined requests behind one in flight)
 * is kept per connection. Request buffers count against a process-wide budget (503 over
 * it) instead of allocating without bound.
 *
 * One request at a time per connection. A complete request is dispatched to the handler
 * and parsing stops. If the handler replies
 * at once, parsing resumes on the same bytes (pipelining); if the reply comes later (Redis,
 * SQL), the unparsed rest is kept in c->in and parsing resumes from http_reply(). So
 * replies always leave in request order. Replies produced during one read are collected
 * in c->out and written with one send(); when the socket is full the rest waits for a
 * write event, and above OUT_HIGH unsent bytes we stop parsing and reading; output that
 * does not drain for the write timeout closes the connection.
 *
 * Connection states (flags on conn_t):
 *
 *   idle --first byte--> in_msg --message complete--> in_flight --http_reply--> idle
 *      \                    \--bad input: error reply, closing                   |
 *       \--idle timeout      \--header timeout: close        keep-alive off: closing
 *   closing --output flushed--> free, or linger (shutdown(SHUT_WR), drain input for
 *                               LINGER_MS so the client reads the error, not a RST)
 *   dead (send/recv error): output dropped; freed as soon as nothing is in flight.
 *
 * Invariant: a connection with a request in flight is never freed, whatever happens to
 * its socket: the handler's callback still holds &c->req. http_reply() frees it if needed.
 *
 * Timeouts are checked by one sweep per second over the worker's connections (cheaper
 * than re-arming a timer per request; the limits are in seconds anyway). */
#include "http/http.h"

#include <arpa/inet.h>
#include <errno.h>
#include <event2/event.h>
#include <limits.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "core/app.h"
#include "http/bodylimit.h"
#include "http/clientip.h"
#include "core/clock.h"
#include "http/connlimit.h"
#include "http/h1.h"
#include "core/log.h"
#include "server/metrics.h"
#include "core/sb.h"
#include "http/steer.h"
#include "core/url.h"
#include "server/worker.h"
#include "core/xmem.h"

enum {
    READ_CHUNK = 32 * 1024,    /* per-worker scratch buffer for recv() */
    OUT_HIGH = 64 * 1024,      /* unsent reply bytes above which we stop parsing and reading */
    KEEP_CAP = 4096,           /* per-connection buffers above this are released after use */
    READS_PER_RUN = 8,         /* fairness: recv() calls per connection per loop turn */
    ACCEPTS_PER_CB = 64,
    SWEEP_MS = 1000,
    REBALANCE_MS = 100,        /* steer.h: from an accept to the check of where to move */
    FOLLOW_MAX = 512,          /* connections asked for their CPU per check */
    LINGER_MS = 2000,
    LINGER_MAX_BYTES = 1 << 20,
    ACCEPT_PAUSE_MS = 1000,    /* after EMFILE & co. */
    BODY_GRACE_MS = 2000,      /* --min-body-rate applies after this much of a body's time */
};

/* The headers of every answer under /admin (the sale board's page and its API): it must
 * not be framed (clickjacking of its buttons), run or load anything but its own files,
 * be sniffed into another type, or be kept by a cache (its data needs the admin token). */
static const char admin_headers[] =
    "X-Frame-Options: DENY\r\n"
    "Content-Security-Policy: default-src 'none'; script-src 'self'; style-src 'self'; "
    "img-src 'self' data:; connect-src 'self'; form-action 'self'; base-uri 'none'; "
    "frame-ancestors 'none'\r\n"
    "X-Content-Type-Options: nosniff\r\n"
    "Cache-Control: no-store\r\n"
    "Referrer-Policy: no-referrer\r\n";

enum { P_HEAD = 0, P_BODY_LENGTH, P_BODY_CHUNKED };

typedef struct http_worker http_worker_t;

typedef struct conn {
    http_worker_t *hw;
    struct conn *prev, *next;  /* hw->conns */
    int fd;
    struct event *rev, *wev;   /* wev created on the first EAGAIN */
    http_req_t req;            /* the one request being received or handled */

    /* the request being received */
    sb_t url, auth, admin, xff, pass, paysig, body;
    const char *path, *query;  /* split from url (split_url) */
    size_t path_len;
    int phase;                 /* P_*: head, Content-Length body, chunked body */
    uint64_t body_left;        /* P_BODY_LENGTH: bytes still to come */
    uint64_t body_got;         /* body bytes received (chunked: with the framing) */
    uint64_t body_start_ms;    /* when the head before the body was complete */
    h1_chunked_t chunked;      /* P_BODY_CHUNKED */
    size_t scan;               /* h1_head_len's resume point in the unparsed head */
    int method;                /* HM_* */
    size_t charged;            /* bytes of the buffers above (and in) counted in the budget */
    uint64_t nreq;             /* requests begun on this connection */

    sb_t in;                   /* received, not yet parsed (only while paused) */
    size_t in_off;
    sb_t out;                  /* replies not yet sent */
    size_t out_off;

    uint64_t last_ms;          /* last byte received or sent */
    uint64_t out_ms;           /* pending output: last progress (or when it got stuck) */
    uint64_t msg_start_ms;     /* first byte of the request being received */
    uint64_t linger_ms;
    size_t linger_bytes;

    unsigned has_auth : 1, has_admin : 1, has_xff : 1, has_pass : 1, has_paysig : 1;
    unsigned need_more : 1;    /* c->in holds an incomplete head: append before parsing */
    unsigned in_msg : 1;       /* a request has started and is not complete */
    unsigned in_flight : 1;    /* handler called, http_reply not yet */
    unsigned keep_alive : 1;   /* of the current request */
    unsigned is_head : 1;
    unsigned closing : 1;      /* no more requests: close once the output is sent */
    unsigned want_linger : 1;  /* input may be left unread: linger when closing */
    unsigned eof : 1;          /* the peer has shut down its side */
    unsigned dead : 1;         /* socket error: drop output, free when not in flight */
    unsigned busy : 1;         /* inside conn_run(): guards against re-entry */
    unsigned readable : 1;     /* the socket may have bytes we have not read */
    unsigned peer_shut : 1;    /* EV_CLOSED: the peer has shut down its side, and the end
                                  of stream waits behind whatever it sent before */
    unsigned read_on : 1, write_on : 1;
    unsigned linger : 1;
    unsigned listener : 1;     /* HTTP_LISTENER_* */
    unsigned admin_path : 1;   /* the request in flight is under /admin: admin_headers */
    connlimit_key_t ckey;      /* counted in hw->cl until freed */
    connlimit_entry_t *cent;   /* ckey's entry (its buffered bytes), or NULL */
    char peer[INET6_ADDRSTRLEN];
} conn_t;

/* An idle connection on its way to another worker (steer.h): its socket and what of its
 * state outlives a request (the address it is counted under, its timers' bases). */
struct handoff {
    int fd;
    connlimit_key_t ckey;
    connlimit_entry_t *cent;
    char peer[INET6_ADDRSTRLEN];
    uint64_t nreq, last_ms, msg_start_ms;
    struct handoff *next;
};

struct http_worker {
    worker_t *w;
    http_handler_fn handler;
    int lfd;
    int port;                  /* the bound port (useful when 0 was asked) */
    struct event *lev;
    int mlfd;                  /* worker 0's --metrics-listen socket, or -1 */
    struct event *mlev;
    connlimit_t *cl;           /* connections per client address (app's), or NULL */
    const clientip_set_t *trusted; /* --trusted-proxy (app's), or NULL: not capped */
    int accept_on;
    uint64_t accept_resume_ms;
    uint64_t held_start_ms, held_until_ms; /* http_worker_hold_accept: closed until opened or then */
    int held;
    struct event *sweep_ev;
    struct event *grace_ev;    /* fires grace_ms after http_worker_stop */
    struct event *done_ev;     /* activated when the last connection goes */
    conn_t *conns;
    atomic_int nconns;         /* written by this worker only; read by /metrics anywhere */
    atomic_int npublic;        /* of them, on the public listener: the load steer.h counts */

    /* Connections other workers handed to this one (steer.h): a list under ho_mu that
     * take_handoffs() empties on this worker's loop; what is left at free is closed.
     * incoming counts them until taken, open_to_handoffs says whether to send any; both
     * are read by the other workers. */
    pthread_mutex_t ho_mu;
    struct handoff *ho_head;
    atomic_int incoming;
    atomic_int open_to_handoffs;
    struct event *rebalance_ev; /* rebalance(hw, 1): REBALANCE_MS after an accept, or
                                   again when a check left connections to move */
    int rebalance_armed;
    char *rbuf;

    size_t max_header, max_body;
    int max_conns;
    uint64_t idle_ms, header_ms, write_ms;
    uint64_t min_body_rate;    /* bytes/s, 0 = off */
    int sndbuf;                /* SO_SNDBUF of accepted sockets, 0 = the kernel's */

    int stopping, grace_over, done_called;
    int grace_ms;
    void (*done)(worker_t *w);

    time_t date_sec;           /* the Date header, formatted once per second */
    char date[64];
    size_t date_len;
    uint64_t rejected;         /* connections refused over max_conns */
    uint64_t rejected_ip;      /* connections refused over max_conns_per_ip */
    size_t max_buffered;       /* budget of request bytes held, all workers together */
    size_t max_buffered_ip;    /* of it, what one client address (connlimit's key) may hold */
    uint64_t over_budget;      /* requests refused for it (a warning every 1000) */
};

static void conn_run(conn_t *c);
static conn_t *conn_setup(http_worker_t *hw, int fd, const connlimit_key_t *key,
                          connlimit_entry_t *cent, const char *peer);
static void conn_free(conn_t *c);
static void cbuf_done(conn_t *c, sb_t *s);
static void end_request(conn_t *c);

/* The connection count is the only field another thread reads (http_worker_conns from
 * /metrics on any worker). Only the owner writes it, so a relaxed load and store suffice. */
static int nconns(const http_worker_t *hw)
{
    return atomic_load_explicit(&hw->nconns, memory_order_relaxed);
}

static void set_nconns(http_worker_t *hw, int n)
{
    atomic_store_explicit(&hw->nconns, n, memory_order_relaxed);
}

/* Whether other workers may hand connections to this one (rebalance): not while its
 * accepting is held for Redis, nor once it stops. */
static void set_open_to_handoffs(http_worker_t *hw, int open)
{
    atomic_store_explicit(&hw->open_to_handoffs, open, memory_order_relaxed);
}

/* Sets which listener c came from; the public ones are counted for steer.h. */
static void conn_mark(conn_t *c, int listener)
{
    c->listener = (unsigned)listener;
    if (listener == HTTP_LISTENER_PUBLIC)
        atomic_fetch_add_explicit(&c->hw->npublic, 1, memory_order_relaxed);
}

static size_t pending(const conn_t *c)
{
    return c->out.len - c->out_off;
}

/* send(2) and recv(2) without glibc's wrappers. Those are thread-cancellation points: in
 * a process with threads each call flips the thread's cancellation state with two atomic
 * operations around the syscall (1.5 % of a sold-out answer's CPU in perf). No thread of
 * ours is ever cancelled, so the plain syscall does the same job. */
static ssize_t sock_send(int fd, const void *p, size_t n, int flags)
{
    return syscall(SYS_sendto, fd, p, n, flags, NULL, 0);
}

static ssize_t sock_recv(int fd, void *p, size_t n)
{
    return syscall(SYS_recvfrom, fd, p, n, 0, NULL, NULL);
}

/* ==== Replies ==== */

static const char *reason(int status)
{
    switch (status) {
    case 100: return "Continue";
    case 200: return "OK";
    case 201: return "Created";
    case 202: return "Accepted";
    case 204: return "No Content";
    case 301: return "Moved Permanently";
    case 302: return "Found";
    case 304: return "Not Modified";
    case 400: return "Bad Request";
    case 401: return "Unauthorized";
    case 403: return "Forbidden";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 408: return "Request Timeout";
    case 409: return "Conflict";
    case 410: return "Gone";
    case 413: return "Content Too Large";
    case 414: return "URI Too Long";
    case 415: return "Unsupported Media Type";
    case 417: return "Expectation Failed";
    case 422: return "Unprocessable Content";
    case 429: return "Too Many Requests";
    case 431: return "Request Header Fields Too Large";
    case 500: return "Internal Server Error";
    case 501: return "Not Implemented";
    case 502: return "Bad Gateway";
    case 503: return "Service Unavailable";
    case 504: return "Gateway Timeout";
    default: return "Unknown";
    }
}

/* Writes v (a length or a count of seconds: below 2^63) in decimal at p; returns the
 * end. */
static char *put_uint(char *p, uint64_t v)
{
    return p + sb_dec(p, (int64_t)v);
}

static char *put_str(char *p, const char *z, size_t n)
{
    memcpy(p, z, n);
    return p + n;
}

#define PUT_LIT(p, lit) put_str((p), (lit), sizeof(lit) - 1)

/* "Date: Sun, 29 Nov 2026 16:45:00 GMT\r\n", re-formatted only when the second changes.
 * Built by hand: strftime's %a/%b follow the locale. The second is the loop's cached
 * clock's (clock.h), not one more clock read per reply. */
static void update_date(http_worker_t *hw)
{
    static const char wday[7][4] = {"Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"};
    static const char mon[12][4] = {"Jan", "Feb", "Mar", "Apr", "May", "Jun",
                                    "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"};
    time_t now = (time_t)(clock_now_wall_ms() / 1000u);
    if (now != hw->date_sec) {
        struct tm tm;
        gmtime_r(&now, &tm);
        int n = snprintf(hw->date, sizeof hw->date, "Date: %s, %02d %s %04d %02d:%02d:%02d GMT\r\n",
                         wday[tm.tm_wday % 7], tm.tm_mday, mon[tm.tm_mon % 12], tm.tm_year + 1900,
                         tm.tm_hour, tm.tm_min, tm.tm_sec);
        hw->date_len = n > 0 && (size_t)n < sizeof hw->date ? (size_t)n : 0;
        hw->date_sec = now;
    }
}

/* Appends one complete response to c->out: the head is written straight into the
 * buffer (one size check, no per-field appends), then the body. */
static void put_reply(conn_t *c, int status, const char *ctype, const char *body, size_t len,
                      int keep)
{
    http_worker_t *hw = c->hw;
    sb_t *o = &c->out;
    if (status < 100 || status > 999)
        status = 500;
    int bodyless = status == 204 || status == 304 || (status >= 100 && status < 200);
    const char *why = reason(status);
    size_t wlen = strlen(why);
    size_t clen = 0;
    int json = 0;              /* the default type: its line is one literal below */
    if (!bodyless && (ctype || len)) {
        json = !ctype;
        if (!ctype)
            ctype = "application/json;charset=UTF-8";
        clen = strlen(ctype);
    }
    update_date(hw);
    /* status line 13 + reason + CRLF, Content-Type 16 + clen, Content-Length 38,
     * Retry-After 35, Connection 24, Date, final CRLF */
    size_t head_max = 13 + wlen + 2 + 16 + clen + 38 + 35 + 24 + hw->date_len + 2 +
                      (c->admin_path ? sizeof admin_headers - 1 : 0);
    size_t body_len = !bodyless && !c->is_head ? len : 0;
    char *p = sb_reserve(o, head_max + body_len);
    /* Fixed-size copies of literals compile to a few moves; the answers of the hot path
     * (200, JSON) take no variable-length copy before the body. */
    if (status == 200) {
        p = PUT_LIT(p, "HTTP/1.1 200 OK\r\n");
    } else {
        p = PUT_LIT(p, "HTTP/1.1 ");
        *p++ = (char)('0' + status / 100);
        *p++ = (char)('0' + status / 10 % 10);
        *p++ = (char)('0' + status % 10);
        *p++ = ' ';
        p = put_str(p, why, wlen);
        p = PUT_LIT(p, "\r\n");
    }
    if (!bodyless) {
        if (json) {
            p = PUT_LIT(p, "Content-Type: application/json;charset=UTF-8\r\n");
        } else if (clen) {
            p = PUT_LIT(p, "Content-Type: ");
            p = put_str(p, ctype, clen);
            p = PUT_LIT(p, "\r\n");
        }
        p = PUT_LIT(p, "Content-Length: ");
        p = put_uint(p, len);
        p = PUT_LIT(p, "\r\n");
    }
    if (c->req.retry_after_s > 0) {
        p = PUT_LIT(p, "Retry-After: ");
        p = put_uint(p, (uint64_t)c->req.retry_after_s);
        p = PUT_LIT(p, "\r\n");
    }
    if (keep)
        p = PUT_LIT(p, "Connection: keep-alive\r\n");
    else
        p = PUT_LIT(p, "Connection: close\r\n");
    if (c->admin_path)
        p = PUT_LIT(p, admin_headers);
    p = put_str(p, hw->date, hw->date_len);
    p = PUT_LIT(p, "\r\n");
    if (body_len)
        p = put_str(p, body, body_len);
    *p = '\0';
    o->len = (size_t)(p - o->buf);
}

static void count_request(http_worker_t *hw, int status)
{
    metrics_http_done(hw->w->m, status);
}

/* Refuses the request being parsed: JSON error, then close (the rest of the input
 * cannot be trusted to be framed right). */
static void reply_error(conn_t *c, int status)
{
    const char *msg;
    switch (status) {
    case 408: msg = "Request body too slow"; break;
    case 413: msg = "Request body too large"; break;
    case 414: msg = "Request URI too long"; break;
    case 431: msg = "Request header fields too large"; break;
    case 501: msg = "Transfer-Encoding not implemented"; break;
    case 503: msg = "Server busy"; break;
    default: status = 400; msg = "Bad Request"; break;
    }
    char body[128];
    int n = snprintf(body, sizeof body, "{\"success\":false,\"errorMsg\":\"%s\"}", msg);
    c->is_head = 0;
    c->admin_path = 0;
    put_reply(c, status, NULL, body, (size_t)n, 0);
    c->in_msg = 0;
    c->closing = 1;
    c->want_linger = 1;
    /* No handler will see this request: its buffers go back to the budget now, not after
     * the lingering close. */
    end_request(c);
    count_request(c->hw, status);
}

/* Frees request buffers that grew large, so an idle connection stays small. */
static void end_request(conn_t *c)
{
    cbuf_done(c, &c->url);
    cbuf_done(c, &c->auth);
    cbuf_done(c, &c->admin);
    cbuf_done(c, &c->xff);
    cbuf_done(c, &c->pass);
    cbuf_done(c, &c->paysig);
    cbuf_done(c, &c->body);
}

void http_reply(http_req_t *r, int status, const char *content_type, const char *body, size_t len)
{
    conn_t *c = (conn_t *)(void *)((char *)r - offsetof(conn_t, req));
    http_worker_t *hw = c->hw;
    if (!c->in_flight) {
        /* A handler bug (second reply); ignoring it beats corrupting the stream. */
        log_error("http_reply: no request in flight on this connection (status %d ignored)", status);
        return;
    }
    c->in_flight = 0;
    count_request(hw, status);
    if (!c->dead) {
        int keep = c->keep_alive && !hw->stopping;
        put_reply(c, status, content_type, body, len, keep);  /* copies body before end_request */
        if (!keep)
            c->closing = 1;
    }
    c->req.retry_after_s = 0;   /* an error reply before the next dispatch has none */
    end_request(c);
    if (!c->busy) {
        /* An asynchronous reply: send it now, then go on with pipelined input. */
        conn_run(c);
    }
    /* Otherwise we are inside conn_run() (the handler replied at once): it goes on. */
}

/* ==== Request buffers and the global budget ==== */

/* Bytes held in request buffers (url, credentials, body, unparsed input) by every
 * connection of every worker. Over hw->max_buffered a request is refused with 503
 * instead of allocating: many slow clients sending large bodies must not exhaust memory
 * (the allocator's failure would abort the process, xmem.h). */
static _Atomic size_t buffered_total;

static void uncharge(conn_t *c, size_t n)
{
    if (n > c->charged)
        n = c->charged;        /* cannot happen; never let the total wrap */
    c->charged -= n;
    atomic_fetch_sub_explicit(&buffered_total, n, memory_order_relaxed);
    connlimit_uncharge(c->cent, n);
}

/* Grows s to hold n more bytes (exact: that many; otherwise sb's doubling), charged to
 * the process's budget and to the client address's share of it. Returns 0, or 503. The
 * buffers kept between requests are already large enough for the hot path's requests,
 * so a request costs none of this. */
static int cbuf_grow(conn_t *c, sb_t *s, size_t n, int exact)
{
    http_worker_t *hw = c->hw;
    size_t after = exact ? s->len + n + 1 : sb_cap_for(s, n);
    if (after <= s->cap)
        return 0;
    size_t grow = after - s->cap;
    size_t was = atomic_fetch_add_explicit(&buffered_total, grow, memory_order_relaxed);
    int over_ip = 0;
    if (was + grow > hw->max_buffered ||
        (over_ip = connlimit_charge(c->cent, grow, hw->max_buffered_ip) != 0) ||
        (exact ? sb_try_reserve_exact(s, n) : sb_try_reserve(s, n)) != 0) {
        atomic_fetch_sub_explicit(&buffered_total, grow, memory_order_relaxed);
        if (was + grow <= hw->max_buffered && !over_ip)
            connlimit_uncharge(c->cent, grow);     /* charged; realloc failed */
        if (hw->over_budget++ % 1000 == 0)
            log_warn("http: request buffers at their budget (%zu bytes; %zu per client "
                     "address): refusing with 503 (%s)", hw->max_buffered, hw->max_buffered_ip,
                     c->peer);
        return 503;
    }
    c->charged += grow;
    return 0;
}

/* Appends to one of c's request buffers within the budget. Returns 0, or 503. */
static int cbuf_append(conn_t *c, sb_t *s, const void *p, size_t n)
{
    if (n == 0)
        return 0;
    int st = cbuf_grow(c, s, n, 0);
    if (st)
        return st;
    sb_append(s, p, n);        /* fits: no allocation */
    return 0;
}

/* Empties a request buffer; its memory is kept for the next request only if small. */
static void cbuf_done(conn_t *c, sb_t *s)
{
    if (s->cap > KEEP_CAP) {
        uncharge(c, s->cap);
        sb_free(s);
    } else {
        sb_reset(s);
    }
}

static void cbuf_free(conn_t *c, sb_t *s)
{
    uncharge(c, s->cap);
    sb_free(s);
}

/* ==== Requests ==== */

static int method_of(h1_str_t m)
{
    switch (m.n) {
    case 3:
        if (memcmp(m.p, "GET", 3) == 0)
            return HM_GET;
        if (memcmp(m.p, "PUT", 3) == 0)
            return HM_PUT;
        break;
    case 4:
        if (memcmp(m.p, "POST", 4) == 0)
            return HM_POST;
        if (memcmp(m.p, "HEAD", 4) == 0)
            return HM_HEAD;
        break;
    case 6:
        if (memcmp(m.p, "DELETE", 6) == 0)
            return HM_DELETE;
        break;
    default:
        break;
    }
    return HM_OTHER;
}

/* Splits c->url in place into path and query (NUL-terminated), drops a fragment and an
 * absolute-form "http://host" prefix, and removes the "/api" prefix. */
static void split_url(conn_t *c)
{
    char *u = c->url.buf;      /* never empty: h1 refuses an empty request-target */
    if (u[0] != '/') {
        char *s = strstr(u, "://");
        if (s && s < u + strcspn(u, "/?#"))
            u = s + 3 + strcspn(s + 3, "/?#");
    }
    char *q = u + strcspn(u, "?#");
    c->query = "";
    if (*q == '?') {
        *q = '\0';
        c->query = q + 1;
        q[1 + strcspn(q + 1, "#")] = '\0';
    } else if (*q == '#') {
        *q = '\0';
    }
    /* The path is u..q; its length is known, no strlen or strncmp call per request. */
    const char *path = u;
    size_t n = (size_t)(q - u);
    if (n >= 4 && u[0] == '/' && u[1] == 'a' && u[2] == 'p' && u[3] == 'i' &&
        (n == 4 || u[4] == '/')) {
        path += 4;
        n -= 4;
    }
    if (n == 0) {
        path = "/";
        n = 1;
    }
    c->path = path;
    c->path_len = n;
}

/* A parsed head: copies what the handler needs, decides how the body is framed. Returns
 * 0 or an HTTP status. */
static int begin_request(conn_t *c, const h1_head_t *h)
{
    http_worker_t *hw = c->hw;
    int st;
    if ((st = cbuf_append(c, &c->url, h->target.p, h->target.n)) != 0 ||
        (st = cbuf_append(c, &c->auth, h->auth.p, h->auth.n)) != 0 ||
        (st = cbuf_append(c, &c->admin, h->admin.p, h->admin.n)) != 0 ||
        (st = cbuf_append(c, &c->xff, h->xff.p, h->xff.n)) != 0 ||
        (st = cbuf_append(c, &c->pass, h->pass.p, h->pass.n)) != 0 ||
        (st = cbuf_append(c, &c->paysig, h->paysig.p, h->paysig.n)) != 0)
        return st;
    c->has_auth = h->has_auth;
    c->has_admin = h->has_admin;
    c->has_xff = h->has_xff;
    c->has_pass = h->has_pass;
    c->has_paysig = h->has_paysig;
    c->method = method_of(h->method);
    split_url(c);
    /* The route's own body limit (bodylimit.h), so nothing is buffered that it would not
     * read. */
    size_t max_body = bodylimit_for(c->method, c->path, c->path_len, hw->max_body);
    /* An Upgrade (or CONNECT) request is answered as plain HTTP, then the connection is
     * closed: the bytes after it would be another protocol. */
    int upgrade = (h->conn_upgrade && h->has_upgrade) ||
                  (h->method.n == 7 && memcmp(h->method.p, "CONNECT", 7) == 0);
    c->keep_alive = (h->minor == 1 ? !h->conn_close : h->conn_keep_alive) && !upgrade;
    int has_body;
    if (h->chunked) {
        h1_chunked_init(&c->chunked, max_body, hw->max_header);
        c->phase = P_BODY_CHUNKED;
        has_body = 1;
    } else if (h->has_length && h->content_length > 0) {
        if (h->content_length > max_body)
            return 413;
        c->body_left = h->content_length;
        c->phase = P_BODY_LENGTH;
        has_body = 1;
    } else {
        c->phase = P_HEAD;
        has_body = 0;
    }
    c->body_got = 0;
    c->body_start_ms = clock_now_ms();
    if (h->expect_continue && has_body && h->minor == 1) {
        /* The client waits for this before sending the body; it goes out with the next
         * flush, after the replies to any earlier pipelined requests. */
        sb_puts(&c->out, "HTTP/1.1 100 Continue\r\n\r\n");
    }
    return 0;
}

static int body_sink(void *ctx, const char *p, size_t n)
{
    conn_t *c = ctx;
    return cbuf_append(c, &c->body, p, n);
}

static void dispatch(conn_t *c)
{
    http_worker_t *hw = c->hw;
    http_req_t *r = &c->req;
    memset(r, 0, sizeof *r);
    r->w = hw->w;
    r->method = c->method;
    r->path = c->path;
    r->path_len = c->path_len;
    r->query = c->query;
    /* Everything under /admin (the board's page, and its API, also as /api/admin/...)
     * gets admin_headers: one comparison per request. */
    c->admin_path = c->path_len >= 6 && memcmp(c->path, "/admin", 6) == 0 &&
                    (c->path_len == 6 || c->path[6] == '/');
    /* An sb_t's buf is NUL-terminated once it holds a byte; sb_cstr() would allocate
     * (outside the budget) for an empty one. */
    r->authorization = c->has_auth ? (c->auth.len ? c->auth.buf : "") : NULL;
    r->admin_token = c->has_admin ? (c->admin.len ? c->admin.buf : "") : NULL;
    r->forwarded_for = c->has_xff && c->xff.len ? c->xff.buf : NULL;
    r->pass = c->has_pass && c->pass.len ? c->pass.buf : NULL;
    r->pass_len = r->pass ? c->pass.len : 0;
    r->pay_signature = c->has_paysig ? (c->paysig.len ? c->paysig.buf : "") : NULL;
    r->body = c->body.len ? c->body.buf : "";
    r->body_len = c->body.len;
    r->peer = c->peer;
    r->listener = c->listener;
    r->start_ns = clock_now_ns();  /* the wake-up that read the bytes completing it */
    c->is_head = r->method == HM_HEAD;
    c->in_msg = 0;
    c->phase = P_HEAD;
    c->in_flight = 1;
    hw->handler(r);
}

static void refuse_request(conn_t *c, int status, const char *why)
{
    log_debug("http: %s from %s -> %d", why, c->peer, status);
    reply_error(c, status);
}

/* Feeds bytes to the parser, dispatching each complete request. Stops early when a
 * request is in flight, the connection is closing, the output backlog is large, or an
 * incomplete head needs more bytes (then c->need_more is set and the caller keeps the
 * rest). Returns how many bytes were consumed. */
static size_t parse(conn_t *c, const char *data, size_t len)
{
    http_worker_t *hw = c->hw;
    size_t off = 0;
    c->need_more = 0;
    while (off < len) {
        if (c->phase == P_HEAD) {
            if (!c->in_msg) {
                /* RFC 9112 2.2: empty lines (CRLF) before a request are ignored. */
                if (data[off] == '\r') {
                    if (off + 1 >= len) {
                        c->need_more = 1;
                        break;
                    }
                    if (data[off + 1] == '\n') {
                        off += 2;
                        continue;
                    }
                }
                c->in_msg = 1;
                c->nreq++;
                c->msg_start_ms = clock_now_ms();
                c->scan = 0;
            }
            long hl = h1_head_len(data + off, len - off, &c->scan, hw->max_header);
            if (hl == 0) {
                c->need_more = 1;
                break;
            }
            if (hl < 0) {
                refuse_request(c, (int)-hl, "bad head");
                break;
            }
            h1_head_t h;
            int st = h1_parse_head(data + off, (size_t)hl, &h);
            if (st == 0)
                st = begin_request(c, &h);
            if (st) {
                refuse_request(c, st, "bad request");
                break;
            }
            off += (size_t)hl;
            if (c->phase != P_HEAD)
                continue;      /* the body follows */
        } else if (c->phase == P_BODY_LENGTH) {
            size_t take = len - off;
            if ((uint64_t)take > c->body_left)
                take = (size_t)c->body_left;
            /* The body's size is known: its buffer is reserved once at that size, not
             * grown by doubling (a 64 KiB body would hold 128 KiB). */
            int st = c->body.len + c->body_left + 1 > c->body.cap
                         ? cbuf_grow(c, &c->body, (size_t)c->body_left, 1) : 0;
            if (st == 0)
                st = cbuf_append(c, &c->body, data + off, take);
            if (st) {
                refuse_request(c, st, "body refused");
                break;
            }
            off += take;
            c->body_left -= take;
            c->body_got += take;
            if (c->body_left > 0)
                continue;
        } else {
            size_t used = 0;
            int st = h1_chunked_feed(&c->chunked, data + off, len - off, &used, body_sink, c);
            off += used;
            c->body_got += used;
            if (st == 0)
                continue;
            if (st != 1) {
                refuse_request(c, st, "bad chunked body");
                break;
            }
        }
        /* A complete request. */
        dispatch(c);
        if (c->in_flight || c->closing || c->dead || pending(c) >= OUT_HIGH)
            break;
    }
    return off;
}

/* ==== Connection I/O ==== */

static void on_write(evutil_socket_t fd, short what, void *arg);

static void arm_write(conn_t *c)
{
    if (c->write_on)
        return;
    if (!c->wev) {
        c->wev = event_new(c->hw->w->base, c->fd, EV_WRITE | EV_PERSIST, on_write, c);
        if (!c->wev) {
            c->dead = 1;
            return;
        }
    }
    if (event_add(c->wev, NULL) == 0) {
        c->write_on = 1;
        c->out_ms = clock_now_ms();    /* --write-timeout-s counts from here */
    } else {
        c->dead = 1;
    }
}

/* Sends what is in c->out; on EAGAIN keeps the rest and arms the write event. */
static void flush(conn_t *c)
{
    while (c->out_off < c->out.len && !c->dead) {
        ssize_t n = sock_send(c->fd, c->out.buf + c->out_off, c->out.len - c->out_off, MSG_NOSIGNAL);
        if (n > 0) {
            c->out_off += (size_t)n;
            c->last_ms = clock_now_ms();
            c->out_ms = c->last_ms;
        } else if (n < 0 && errno == EINTR) {
            continue;
        } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            arm_write(c);
            if (!c->dead)
                return;
        } else {
            c->dead = 1;       /* EPIPE, ECONNRESET: the client is gone */
        }
    }
    /* All sent, or dropped because the connection is dead. */
    if (c->out.cap > KEEP_CAP)
        sb_free(&c->out);
    else
        sb_reset(&c->out);
    c->out_off = 0;
    if (c->write_on) {
        event_del(c->wev);
        c->write_on = 0;
    }
}

static void stop_reading(conn_t *c)
{
    if (c->read_on) {
        event_del(c->rev);
        c->read_on = 0;
    }
}

/* Closes a connection that has nothing more to say. After an error reply the client may
 * still be sending (a body we refused): closing now with unread input would make the
 * kernel send a RST, which can destroy our reply in flight. So shut down our side and
 * read and discard for a while (nginx's "lingering close"). */
static void linger_drain(conn_t *c);

static void conn_finish(conn_t *c)
{
    if (!c->eof && (c->want_linger || c->in_off < c->in.len || c->in_msg)) {
        if (shutdown(c->fd, SHUT_WR) == 0) {
            c->linger = 1;
            c->linger_ms = clock_now_ms();
            c->linger_bytes = 0;
            if (!c->read_on && event_add(c->rev, NULL) == 0)
                c->read_on = 1;
            if (c->read_on) {
                /* What has arrived already brings no new edge: drain it now. */
                linger_drain(c);
                return;
            }
        }
    }
    conn_free(c);
}

static void linger_drain(conn_t *c)
{
    for (;;) {
        ssize_t n = sock_recv(c->fd, c->hw->rbuf, READ_CHUNK);
        if (n > 0) {
            c->linger_bytes += (size_t)n;
            if (c->linger_bytes > LINGER_MAX_BYTES)
                break;
            continue;
        }
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            return;
        break;                 /* EOF or error: done */
    }
    conn_free(c);
}

/* What to do once conn_run() has done all it can: free, linger, or wait for input. */
static void conn_tail(conn_t *c)
{
    http_worker_t *hw = c->hw;
    if (c->in_flight)
        return;                /* http_reply() will come back here */
    if (c->dead || hw->grace_over) {
        conn_free(c);          /* after the grace period, unsent output is dropped */
        return;
    }
    if (pending(c) > 0)
        return;                /* the write event comes back here */
    if (c->closing) {
        conn_finish(c);
        return;
    }
    if (c->eof || (hw->stopping && !c->in_msg && c->in_off >= c->in.len)) {
        conn_free(c);
        return;
    }
    if (!c->read_on) {
        if (event_add(c->rev, NULL) == 0)
            c->read_on = 1;
        else
            conn_free(c);
    }
}

/* The connection's engine: parses what is buffered, reads more while it may, dispatches
 * requests, sends the replies in one batch. Called from the read and write events and
 * from an asynchronous http_reply(). May free c. */
static void conn_run(conn_t *c)
{
    http_worker_t *hw = c->hw;
    if (c->busy)
        return;
    c->busy = 1;
    int reads = 0;
    for (;;) {
        if (c->dead || c->closing || c->in_flight)
            break;
        if (pending(c) >= OUT_HIGH) {
            /* The client is not keeping up with its own pipeline: send before parsing on. */
            if (!c->write_on)
                flush(c);
            if (c->write_on || c->dead)
                break;
        }
        if (c->in_off < c->in.len && !c->need_more) {
            c->in_off += parse(c, c->in.buf + c->in_off, c->in.len - c->in_off);
            if (c->in_off >= c->in.len) {
                cbuf_done(c, &c->in);
                c->in_off = 0;
            }
            continue;
        }
        if (!c->readable || c->eof || reads >= READS_PER_RUN)
            break;
        reads++;
        ssize_t n = sock_recv(c->fd, hw->rbuf, READ_CHUNK);
        if (n > 0) {
            c->last_ms = clock_now_ms();
            /* A short read drained the socket; the read event fires again when more
             * arrives, so don't spend a recv() to learn EAGAIN. Unless the peer has shut
             * down its side: a FIN that came with the data makes no edge of its own, so
             * read on to the end of stream (or the connection would sit open until the
             * idle timeout). */
            if ((size_t)n < READ_CHUNK && !c->peer_shut)
                c->readable = 0;
            size_t used = 0;
            if (c->in_off < c->in.len) {
                /* An incomplete head waits in c->in: the new bytes go after it, and the
                 * next turn parses the whole. */
                if (c->in_off > 0) {
                    memmove(c->in.buf, c->in.buf + c->in_off, c->in.len - c->in_off);
                    c->in.len -= c->in_off;
                    c->in.buf[c->in.len] = '\0';
                    c->in_off = 0;
                }
                c->need_more = 0;
            } else {
                used = parse(c, hw->rbuf, (size_t)n);
            }
            if (used < (size_t)n) {
                if (!c->closing && !c->dead) {
                    int st = cbuf_append(c, &c->in, hw->rbuf + used, (size_t)n - used);
                    if (st)
                        refuse_request(c, st, "input refused");
                } else {
                    c->want_linger = 1;    /* input after the last request: more may follow */
                }
            }
            continue;
        }
        if (n == 0) {
            /* The client has sent all it will: answer what it sent, then close. */
            c->eof = 1;
            c->readable = 0;
            stop_reading(c);
            break;
        }
        if (errno == EINTR)
            continue;
        if (errno == EAGAIN || errno == EWOULDBLOCK) {
            c->readable = 0;
            break;
        }
        c->dead = 1;           /* ECONNRESET and the like */
    }
    if (pending(c) > 0 && !c->write_on)
        flush(c);
    if (reads >= READS_PER_RUN && c->readable && !c->eof && !c->dead && !c->closing &&
        !c->in_flight && c->read_on)
        event_active(c->rev, EV_READ, 1);  /* more to read: no new edge will say so */
    c->busy = 0;
    conn_tail(c);
}

static void on_read(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    conn_t *c = arg;
    if (what & EV_CLOSED)
        c->peer_shut = 1;
    if (c->linger) {
        linger_drain(c);
        return;
    }
    c->readable = 1;
    if (c->dead || c->closing || c->in_flight || c->eof ||
        (c->write_on && pending(c) >= OUT_HIGH))
        return;   /* not now: whatever unblocks c runs conn_run(), which reads */
    conn_run(c);
}

static void on_write(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    conn_t *c = arg;
    flush(c);
    if (c->write_on)
        return;                /* still blocked */
    conn_run(c);
}

static void maybe_done(http_worker_t *hw)
{
    /* done() runs from the loop, not from deep inside whatever freed the connection. */
    if (hw->stopping && !hw->done_called && nconns(hw) == 0 && hw->done_ev)
        event_active(hw->done_ev, EV_TIMEOUT, 0);
}

static void conn_free(conn_t *c)
{
    http_worker_t *hw = c->hw;
    if (c->prev)
        c->prev->next = c->next;
    else
        hw->conns = c->next;
    if (c->next)
        c->next->prev = c->prev;
    set_nconns(hw, nconns(hw) - 1);
    if (c->listener == HTTP_LISTENER_PUBLIC)
        atomic_fetch_sub_explicit(&hw->npublic, 1, memory_order_relaxed);
    if (c->rev)
        event_free(c->rev);
    if (c->wev)
        event_free(c->wev);
    if (c->fd >= 0)
        close(c->fd);
    cbuf_free(c, &c->url);
    cbuf_free(c, &c->auth);
    cbuf_free(c, &c->admin);
    cbuf_free(c, &c->xff);
    cbuf_free(c, &c->pass);
    cbuf_free(c, &c->paysig);
    cbuf_free(c, &c->body);
    cbuf_free(c, &c->in);
    sb_free(&c->out);
    connlimit_release(hw->cl, &c->ckey);
    free(c);
    maybe_done(hw);
}

/* Closes c unless a request is in flight (then only marks it: http_reply frees it). */
static void conn_close(conn_t *c)
{
    if (c->in_flight || c->busy) {
        c->dead = 1;
        return;
    }
    conn_free(c);
}

/* ==== Accepting ==== */

static void refuse(int fd, const char *why)
{
    /* Best effort: one non-blocking send into the fresh socket's empty buffer. */
    char msg[256];
    int blen = (int)strlen(why) + 29;
    int n = snprintf(msg, sizeof msg,
                     "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json;charset=UTF-8\r\n"
                     "Content-Length: %d\r\nConnection: close\r\n\r\n"
                     "{\"success\":false,\"errorMsg\":\"%s\"}", blen, why);
    if (n > 0 && (size_t)n < sizeof msg) {
        ssize_t w = send(fd, msg, (size_t)n, MSG_NOSIGNAL | MSG_DONTWAIT);
        (void)w;
    }
    close(fd);
}

/* Takes an accepted socket into the worker. Returns the connection, or NULL when it was
 * refused (over the per-address cap: a 503) or could not be set up (closed). */
static conn_t *conn_new(http_worker_t *hw, int fd, const struct sockaddr_storage *ss)
{
    char peer[INET6_ADDRSTRLEN];
    if (ss->ss_family == AF_INET)
        inet_ntop(AF_INET, &((const struct sockaddr_in *)ss)->sin_addr, peer, sizeof peer);
    else if (ss->ss_family == AF_INET6)
        inet_ntop(AF_INET6, &((const struct sockaddr_in6 *)ss)->sin6_addr, peer, sizeof peer);
    else
        strcpy(peer, "unknown");
    /* A trusted reverse proxy carries many clients on its connections: not capped (the
     * per-IP request limits see the clients through X-Forwarded-For). */
    connlimit_key_t key;
    connlimit_entry_t *cent;
    connlimit_key(ss, &key);
    if (hw->cl && hw->trusted && clientip_trusted(hw->trusted, peer))
        key.len = 0;
    if (connlimit_acquire(hw->cl, &key, &cent) != 0) {
        if (hw->rejected_ip++ % 1000 == 0)
            log_warn("http: a client address is at --max-conns-per-ip: refusing its connections");
        refuse(fd, "Too many connections from your address");
        return NULL;
    }
    conn_t *c = conn_setup(hw, fd, &key, cent, peer);
    if (!c)
        connlimit_release(hw->cl, &key);
    return c;
}

/* The connection for socket fd, counted under key (acquired by the caller), on hw's loop;
 * NULL (socket closed) when its event cannot be registered. */
static conn_t *conn_setup(http_worker_t *hw, int fd, const connlimit_key_t *key,
                          connlimit_entry_t *cent, const char *peer)
{
    conn_t *c = xcalloc(1, sizeof *c);   /* bounded: the connection caps were checked */
    c->hw = hw;
    c->fd = fd;
    c->ckey = *key;
    c->cent = cent;
    /* Edge-triggered, as nginx does: an event only when bytes arrive, so a connection
     * that was read dry is not polled again by every epoll_wait (level-triggered, the
     * kernel re-checks each reported socket on the next call), and a connection busy
     * with a request needs no epoll_ctl to silence it. c->readable remembers what the
     * edge said until conn_run has read. */
    c->rev = event_new(hw->w->base, fd, EV_READ | EV_PERSIST | EV_ET | EV_CLOSED, on_read, c);
    if (!c->rev || event_add(c->rev, NULL) != 0) {
        if (c->rev)
            event_free(c->rev);
        close(fd);
        free(c);
        return NULL;
    }
    c->read_on = 1;
    c->last_ms = clock_now_ms();
    c->msg_start_ms = c->last_ms;  /* until the first byte: the header timeout runs */
    memcpy(c->peer, peer, sizeof c->peer);
    c->next = hw->conns;
    if (hw->conns)
        hw->conns->prev = c;
    hw->conns = c;
    set_nconns(hw, nconns(hw) + 1);
    return c;
}

static void pause_accepting(http_worker_t *hw)
{
    if (hw->accept_on) {
        event_del(hw->lev);
        if (hw->mlev)
            event_del(hw->mlev);
        hw->accept_on = 0;
    }
    hw->accept_resume_ms = clock_now_ms() + ACCEPT_PAUSE_MS;
}

static void resume_accepting(http_worker_t *hw)
{
    if (hw->held) {
        if (clock_now_ms() < hw->held_until_ms)
            return;
        hw->held = 0;
        set_open_to_handoffs(hw, 1);
        log_warn("http: worker %d accepts connections before its Redis connection is up "
                 "(waited %d ms): its first answers may be 503", hw->w->id,
                 (int)(hw->held_until_ms - hw->held_start_ms));
    }
    if (hw->lev && !hw->accept_on && !hw->stopping && clock_now_ms() >= hw->accept_resume_ms &&
        event_add(hw->lev, NULL) == 0) {
        hw->accept_on = 1;
        if (hw->mlev)
            event_add(hw->mlev, NULL);
    }
}

/* ==== Hand-offs between steered workers (steer.h) ==== */

/* Runs on the receiving worker's loop (posted by rebalance): adopts every connection
 * handed to it since the last call. */
static void take_handoffs(worker_t *w, void *arg)
{
    (void)arg;
    http_worker_t *hw = w->http;
    if (!hw)
        return;
    pthread_mutex_lock(&hw->ho_mu);
    struct handoff *h = hw->ho_head;
    hw->ho_head = NULL;
    pthread_mutex_unlock(&hw->ho_mu);
    if (!h)
        return;           /* an earlier call took them */
    while (h) {
        struct handoff *next = h->next;
        conn_t *c = hw->stopping ? NULL : conn_setup(hw, h->fd, &h->ckey, h->cent, h->peer);
        if (c) {
            conn_mark(c, HTTP_LISTENER_PUBLIC);
            c->nreq = h->nreq;
            c->last_ms = h->last_ms;
            c->msg_start_ms = h->msg_start_ms;
        } else {
            if (hw->stopping)
                close(h->fd);
            connlimit_release(hw->cl, &h->ckey);
        }
        atomic_fetch_sub_explicit(&hw->incoming, 1, memory_order_relaxed);
        free(h);
        h = next;
    }
    maybe_done(hw);
}

/* The workers' loads and openness as steer.h counts them; returns how many workers there
 * are, or 0 when hw is not steered (--steer-connections off or fewer CPUs than workers:
 * the kernel's hash spreads; or stopping). */
static int steer_view(const http_worker_t *hw, int *load, unsigned char *open)
{
    const struct app *app = hw->w->app;
    if (hw->w->cpu < 0 || !app || app->nworkers < 2 || hw->stopping)
        return 0;
    int n = app->nworkers < STEER_MAX_WORKERS ? app->nworkers : STEER_MAX_WORKERS;
    if (hw->w->id >= n)
        return 0;
    for (int i = 0; i < n; i++) {
        const http_worker_t *o = app->workers[i]->http;
        load[i] = atomic_load_explicit(&o->npublic, memory_order_relaxed) +
                  atomic_load_explicit(&o->incoming, memory_order_relaxed);
        open[i] = (unsigned char)atomic_load_explicit(&o->open_to_handoffs, memory_order_relaxed);
    }
    return n;
}

/* A connection between requests, with nothing buffered either way and no event pending
 * on our side: its socket can move to another loop as it is (bytes that arrive meanwhile
 * wait in the kernel; the new owner's edge-triggered registration reports them). */
static int movable(const conn_t *c)
{
    return c->listener == HTTP_LISTENER_PUBLIC && !c->in_flight && !c->busy && !c->in_msg &&
           !c->need_more && !c->closing && !c->dead && !c->eof && !c->linger &&
           !c->readable && !c->write_on && pending(c) == 0 && c->in_off >= c->in.len;
}

/* Moves idle connection c of worker self to worker to's hand-off list, counting it in
 * load[] and marking to in woke[] (the caller wakes the marked workers). */
static void give(conn_t *c, const struct app *app, int self, int to, int *load,
                 unsigned char *woke)
{
    http_worker_t *dst = app->workers[to]->http;
    struct handoff *h = xmalloc(sizeof *h);
    h->fd = c->fd;
    h->ckey = c->ckey;
    h->cent = c->cent;
    memcpy(h->peer, c->peer, sizeof h->peer);
    h->nreq = c->nreq;
    h->last_ms = c->last_ms;
    h->msg_start_ms = c->msg_start_ms;
    atomic_fetch_add_explicit(&dst->incoming, 1, memory_order_relaxed);
    pthread_mutex_lock(&dst->ho_mu);
    h->next = dst->ho_head;
    dst->ho_head = h;
    pthread_mutex_unlock(&dst->ho_mu);
    c->fd = -1;                      /* the socket and its count now travel with h */
    c->ckey.len = 0;
    conn_free(c);
    load[to]++;
    load[self]--;
    woke[to] = 1;
}

/* The worker steered to CPU cpu, or -1. */
static int worker_on_cpu(const struct app *app, int n, int cpu)
{
    for (int i = 0; i < n; i++) {
        if (app->workers[i]->cpu == cpu)
            return i;
    }
    return -1;
}

static void arm_rebalance(http_worker_t *hw)
{
    struct timeval tv = {0, REBALANCE_MS * 1000};
    if (!hw->rebalance_armed && hw->rebalance_ev)
        hw->rebalance_armed = event_add(hw->rebalance_ev, &tv) == 0;
}

/* steer.h's two moves, of idle connections only. With follow (REBALANCE_MS after an
 * accept): a connection whose packets now arrive on another worker's CPU (SO_INCOMING_CPU
 * of the connected socket: the CPU that processed its last segment) goes to that worker
 * while it has fewer connections than this one, which undoes what an earlier balancing
 * did to a client thread's connections once another thread's arrive. Then, when this
 * worker has more than its margin over the least loaded one: half the difference goes
 * there. At every sweep only the second, which costs no system call. */
static void rebalance(http_worker_t *hw, int follow)
{
    int load[STEER_MAX_WORKERS];
    unsigned char open[STEER_MAX_WORKERS], woke[STEER_MAX_WORKERS];
    int n = steer_view(hw, load, open);
    if (n == 0)
        return;
    const struct app *app = hw->w->app;
    int self = hw->w->id, moved = 0, again = 0;
    memset(woke, 0, (size_t)n);
    if (follow) {
        int checked = 0;
        for (conn_t *c = hw->conns, *next; c; c = next) {
            next = c->next;
            if (!movable(c))
                continue;
            if (checked++ >= FOLLOW_MAX) {
                again = 1;
                break;
            }
            int cpu = -1;
            socklen_t cl = sizeof cpu;
            if (getsockopt(c->fd, SOL_SOCKET, SO_INCOMING_CPU, &cpu, &cl) != 0 ||
                cpu == hw->w->cpu)
                continue;
            int j = worker_on_cpu(app, n, cpu);
            if (j < 0 || j == self || !open[j] || !steer_may_follow(load[self], load[j]))
                continue;
            give(c, app, self, j, load, woke);
            moved++;
        }
    }
    int to = steer_pick(load, open, n, self);
    if (to != self) {
        int k = steer_moves(load[self], load[to]), m = 0, i = 0, given = 0;
        for (const conn_t *c = hw->conns; c; c = c->next)
            m += movable(c);
        for (conn_t *c = hw->conns, *next; c && given < k; c = next) {
            next = c->next;
            if (!movable(c) || !steer_take(i++, m, k))
                continue;
            give(c, app, self, to, load, woke);
            moved++;
            given++;
        }
        again |= given < k;          /* the others were busy: again soon */
    }
    /* A post that comes too late at shutdown is dropped; hw_free closes what the lists
     * still hold. */
    for (int j = 0; j < n; j++) {
        if (woke[j])
            worker_post(app->workers[j], take_handoffs, NULL);
    }
    if (moved)
        log_debug("http: worker %d gave %d connection(s) to other workers (now %d)",
                  hw->w->id, moved, load[self]);
    if (again)
        arm_rebalance(hw);
}

static void on_rebalance(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    http_worker_t *hw = arg;
    hw->rebalance_armed = 0;
    rebalance(hw, 1);
}

static void on_accept(evutil_socket_t lfd, short what, void *arg)
{
    (void)what;
    http_worker_t *hw = arg;
    for (int i = 0; i < ACCEPTS_PER_CB; i++) {
        struct sockaddr_storage ss;
        socklen_t sl = sizeof ss;
        int fd = accept4(lfd, (struct sockaddr *)&ss, &sl, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) {
            if (errno == EINTR || errno == ECONNABORTED)
                continue;
            if (errno == EAGAIN || errno == EWOULDBLOCK)
                return;
            /* Out of descriptors or memory: the level-triggered listener would spin.
             * Pause accepting for a moment; the sweep resumes it. */
            log_warn("http: accept: %s; pausing accepts for %d ms", strerror(errno), ACCEPT_PAUSE_MS);
            pause_accepting(hw);
            return;
        }
        if (nconns(hw) >= hw->max_conns) {
            if (hw->rejected++ % 1000 == 0)
                log_warn("http: worker %d at max_conns (%d): refusing connections", hw->w->id,
                         hw->max_conns);
            refuse(fd, "Too many connections");
            continue;
        }
        int one = 1;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        /* A fixed send buffer: autotuned, a client that does not read its replies pins
         * up to tcp_wmem's maximum (4 MiB) of kernel memory until the write timeout.
         * Replies are small; once per accept, nothing per request. */
        if (hw->sndbuf > 0)
            setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &hw->sndbuf, sizeof hw->sndbuf);
        conn_t *c = conn_new(hw, fd, &ss);
        if (c)
            conn_mark(c, lfd == hw->mlfd ? HTTP_LISTENER_METRICS : HTTP_LISTENER_PUBLIC);
        if (c && lfd == hw->lfd && hw->w->cpu >= 0)
            arm_rebalance(hw);
    }
}

/* ==== Timers and stopping ==== */

/* A request body arriving slower than --min-body-rate, once BODY_GRACE_MS have passed
 * since its head: it would hold its buffer (and a share of the budget) for the whole
 * header timeout. */
static int body_too_slow(const conn_t *c, uint64_t now)
{
    const http_worker_t *hw = c->hw;
    if (!hw->min_body_rate || !c->in_msg || c->phase == P_HEAD)
        return 0;
    uint64_t t = now - c->body_start_ms;
    if (t < BODY_GRACE_MS)
        return 0;
    return c->body_got * 1000 < hw->min_body_rate * (t - BODY_GRACE_MS);
}

static void on_sweep(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    http_worker_t *hw = arg;
    uint64_t now = clock_now_ms();
    for (conn_t *c = hw->conns, *next; c; c = next) {
        next = c->next;
        if (c->in_flight || c->busy)
            continue;          /* the handler answers within its own deadline */
        int expired;
        if (c->linger)
            expired = now - c->linger_ms >= LINGER_MS;
        else if (pending(c) > 0)
            expired = now - c->out_ms >= hw->write_ms;      /* the client stopped reading */
        else if (body_too_slow(c, now)) {
            log_debug("http: request body from %s slower than %llu bytes/s: 408", c->peer,
                      (unsigned long long)hw->min_body_rate);
            refuse_request(c, 408, "body too slow");
            conn_run(c);       /* sends the 408, then the lingering close */
            continue;
        } else if (c->in_msg || c->nreq == 0)
            expired = now - c->msg_start_ms >= hw->header_ms; /* slowloris, or silent */
        else
            expired = now - c->last_ms >= hw->idle_ms;
        if (expired) {
            if (c->in_msg && !c->linger)
                log_debug("http: request from %s not complete in time: closing", c->peer);
            conn_free(c);
        }
    }
    rebalance(hw, 0);
    resume_accepting(hw);
}

static void on_done(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    http_worker_t *hw = arg;
    if (nconns(hw) != 0 || hw->done_called)
        return;
    hw->done_called = 1;
    event_del(hw->sweep_ev);
    event_del(hw->grace_ev);
    if (hw->done)
        hw->done(hw->w);
}

static void on_grace(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    http_worker_t *hw = arg;
    hw->grace_over = 1;
    int inflight = 0;
    for (conn_t *c = hw->conns, *next; c; c = next) {
        next = c->next;
        if (c->in_flight) {
            /* Never freed under a pending callback: the Redis/SQL layers answer within
             * their deadlines; the reply goes out with Connection: close, then it is freed. */
            inflight++;
            continue;
        }
        conn_close(c);
    }
    if (inflight)
        log_warn("http: worker %d: grace period over, waiting for %d in-flight request(s)",
                 hw->w->id, inflight);
}

void http_worker_stop(worker_t *w, int grace_ms, void (*done)(worker_t *w))
{
    http_worker_t *hw = w->http;
    if (!hw) {
        if (done)
            done(w);
        return;
    }
    if (hw->stopping)
        return;
    hw->stopping = 1;
    set_open_to_handoffs(hw, 0);
    hw->done = done;
    hw->grace_ms = grace_ms > 0 ? grace_ms : 0;
    if (hw->lev) {
        event_free(hw->lev);
        hw->lev = NULL;
        hw->accept_on = 0;
    }
    if (hw->lfd >= 0) {
        close(hw->lfd);
        hw->lfd = -1;
    }
    if (hw->mlev) {
        event_free(hw->mlev);
        hw->mlev = NULL;
    }
    if (hw->mlfd >= 0) {
        close(hw->mlfd);
        hw->mlfd = -1;
    }
    struct timeval tv = {hw->grace_ms / 1000, (hw->grace_ms % 1000) * 1000};
    evtimer_add(hw->grace_ev, &tv);
    /* Idle keep-alive connections go now; the others finish their request first and
     * get "Connection: close" on the reply. */
    for (conn_t *c = hw->conns, *next; c; c = next) {
        next = c->next;
        if (!c->in_flight && !c->busy && (c->linger || (!c->in_msg && pending(c) == 0 &&
                                                         c->in_off >= c->in.len)))
            conn_free(c);
    }
    maybe_done(hw);
}

/* ==== Setup ==== */

/* Opens a non-blocking SO_REUSEPORT listener on host:port. Worker 0 first checks that no
 * other process listens there: SO_REUSEPORT would otherwise let a second instance share
 * the port silently (same user) and split the traffic. server.c initialises worker 0
 * first, so its probe runs before any of our own sockets exist. cpu >= 0 (the worker is
 * steered there): SO_INCOMING_CPU, so that the kernel (6.2 and later) gives a connection
 * whose handshake it processed on that CPU to this listener rather than by hash. */
static int open_listener(int worker_id, int cpu, const char *host, int port, int *bound,
                         char *err, size_t errlen)
{
    char h[256];
    snprintf(h, sizeof h, "%s", host ? host : "");
    size_t hl = strlen(h);
    if (hl >= 2 && h[0] == '[' && h[hl - 1] == ']') {   /* "[::1]" -> "::1" */
        memmove(h, h + 1, hl - 2);
        h[hl - 2] = '\0';
    }
    const char *node = h[0] && strcmp(h, "*") != 0 ? h : NULL;
    char portstr[16];
    snprintf(portstr, sizeof portstr, "%d", port);
    struct addrinfo hints, *res = NULL;
    memset(&hints, 0, sizeof hints);
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
    int rc = getaddrinfo(node, portstr, &hints, &res);
    if (rc != 0) {
        snprintf(err, errlen, "listen %s:%d: %s", h, port, gai_strerror(rc));
        return -1;
    }
    int fd = -1, saved = 0;
    for (struct addrinfo *ai = res; ai && fd < 0; ai = ai->ai_next) {
        int one = 1;
        if (worker_id == 0 && port != 0) {
            int probe = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
            if (probe >= 0) {
                setsockopt(probe, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
                int in_use = bind(probe, ai->ai_addr, ai->ai_addrlen) < 0 && errno == EADDRINUSE;
                close(probe);
                if (in_use) {
                    saved = EADDRINUSE;
                    continue;
                }
            }
        }
        fd = socket(ai->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        if (fd < 0) {
            saved = errno;
            continue;
        }
        if (setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) < 0 ||
            setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof one) < 0 ||
            (cpu >= 0 && setsockopt(fd, SOL_SOCKET, SO_INCOMING_CPU, &cpu, sizeof cpu) < 0) ||
            bind(fd, ai->ai_addr, ai->ai_addrlen) < 0 || listen(fd, 4096) < 0) {
            saved = errno;
            close(fd);
            fd = -1;
        }
    }
    freeaddrinfo(res);
    if (fd < 0) {
        snprintf(err, errlen, "listen %s:%d: %s", h, port,
                 saved == EADDRINUSE ? "address already in use (another process listens there)"
                                     : strerror(saved));
        return -1;
    }
    struct sockaddr_storage ss;
    socklen_t sl = sizeof ss;
    *bound = port;
    if (getsockname(fd, (struct sockaddr *)&ss, &sl) == 0) {
        if (ss.ss_family == AF_INET)
            *bound = ntohs(((struct sockaddr_in *)&ss)->sin_port);
        else if (ss.ss_family == AF_INET6)
            *bound = ntohs(((struct sockaddr_in6 *)&ss)->sin6_port);
    }
    return fd;
}

static void hw_free(http_worker_t *hw)
{
    if (hw->lev)
        event_free(hw->lev);
    if (hw->sweep_ev)
        event_free(hw->sweep_ev);
    if (hw->grace_ev)
        event_free(hw->grace_ev);
    if (hw->done_ev)
        event_free(hw->done_ev);
    if (hw->lfd >= 0)
        close(hw->lfd);
    if (hw->mlev)
        event_free(hw->mlev);
    if (hw->mlfd >= 0)
        close(hw->mlfd);
    if (hw->rebalance_ev)
        event_free(hw->rebalance_ev);
    for (struct handoff *h = hw->ho_head, *next; h; h = next) {
        next = h->next;
        close(h->fd);
        connlimit_release(hw->cl, &h->ckey);
        free(h);
    }
    pthread_mutex_destroy(&hw->ho_mu);
    free(hw->rbuf);
    free(hw);
}

int http_worker_init(worker_t *w, const char *host, int port, http_handler_fn handler, char *err,
                     size_t errlen)
{
    http_worker_t *hw = xcalloc(1, sizeof *hw);
    hw->w = w;
    hw->handler = handler;
    hw->lfd = -1;
    hw->mlfd = -1;
    pthread_mutex_init(&hw->ho_mu, NULL);
    hw->cl = w->app ? w->app->connlimit : NULL;
    hw->trusted = w->app ? w->app->trusted : NULL;
    const config_t *cfg = w->app ? &w->app->cfg : NULL;
    /* Zero means "not set" (a test harness): fall back to config.h's defaults. */
    hw->max_header = cfg && cfg->max_header_bytes ? cfg->max_header_bytes : 8192;
    hw->max_body = cfg && cfg->max_body_bytes ? cfg->max_body_bytes : 65536;
    hw->max_conns = cfg && cfg->max_conns > 0 ? cfg->max_conns : 10000;
    hw->idle_ms = (uint64_t)(cfg && cfg->idle_timeout_s > 0 ? cfg->idle_timeout_s : 60) * 1000;
    hw->header_ms = (uint64_t)(cfg && cfg->header_timeout_s > 0 ? cfg->header_timeout_s : 10) * 1000;
    hw->max_buffered = cfg && cfg->max_buffered_bytes ? cfg->max_buffered_bytes : (size_t)256 << 20;
    int pct = cfg && cfg->max_buffered_ip_pct > 0 ? cfg->max_buffered_ip_pct : 10;
    hw->max_buffered_ip = hw->max_buffered / 100 * (size_t)pct;
    hw->write_ms = (uint64_t)(cfg && cfg->write_timeout_s > 0 ? cfg->write_timeout_s : 10) * 1000;
    hw->min_body_rate = cfg ? (uint64_t)cfg->min_body_rate : 1024;
    hw->sndbuf = cfg ? (int)cfg->sndbuf_bytes : 65536;
    hw->rbuf = xmalloc(READ_CHUNK);
    hw->lfd = open_listener(w->id, w->cpu, host, port, &hw->port, err, errlen);
    if (hw->lfd < 0) {
        hw_free(hw);
        return -1;
    }
    if (w->id == 0 && cfg && cfg->metrics_listen[0]) {
        /* /metrics on its own socket (worker 0 only: scrapes are rare and cheap). */
        char mhost[256];
        int mport, mbound;
        if (config_split_hostport(cfg->metrics_listen, mhost, sizeof mhost, &mport) < 0) {
            snprintf(err, errlen, "bad --metrics-listen \"%s\"", cfg->metrics_listen);
            hw_free(hw);
            return -1;
        }
        hw->mlfd = open_listener(0, -1, mhost, mport, &mbound, err, errlen);
        if (hw->mlfd < 0) {
            hw_free(hw);
            return -1;
        }
        hw->mlev = event_new(w->base, hw->mlfd, EV_READ | EV_PERSIST, on_accept, hw);
        if (!hw->mlev || event_add(hw->mlev, NULL) != 0) {
            snprintf(err, errlen, "cannot register the metrics listener with the event loop");
            hw_free(hw);
            return -1;
        }
        log_info("http: /metrics served on %s:%d only", mhost, mbound);
    }
    hw->lev = event_new(w->base, hw->lfd, EV_READ | EV_PERSIST, on_accept, hw);
    hw->sweep_ev = event_new(w->base, -1, EV_PERSIST, on_sweep, hw);
    /* Created now so that stopping cannot fail half-way for want of memory. */
    hw->grace_ev = evtimer_new(w->base, on_grace, hw);
    hw->done_ev = event_new(w->base, -1, 0, on_done, hw);
    hw->rebalance_ev = evtimer_new(w->base, on_rebalance, hw);
    struct timeval tv = {SWEEP_MS / 1000, (SWEEP_MS % 1000) * 1000};
    if (!hw->lev || !hw->sweep_ev || !hw->grace_ev || !hw->done_ev || !hw->rebalance_ev ||
        event_add(hw->lev, NULL) != 0 ||
        event_add(hw->sweep_ev, &tv) != 0) {
        snprintf(err, errlen, "cannot register the listener with the event loop");
        hw_free(hw);
        return -1;
    }
    hw->accept_on = 1;
    set_open_to_handoffs(hw, 1);
    w->http = hw;
    log_debug("http: worker %d listening on %s:%d", w->id, host, hw->port);
    return 0;
}

void http_worker_hold_accept(worker_t *w, int max_ms)
{
    http_worker_t *hw = w->http;
    if (!hw || !hw->lev)
        return;
    if (hw->accept_on) {
        event_del(hw->lev);
        if (hw->mlev)
            event_del(hw->mlev);
        hw->accept_on = 0;
    }
    hw->held = 1;
    set_open_to_handoffs(hw, 0);
    hw->held_start_ms = clock_now_ms();
    hw->held_until_ms = hw->held_start_ms + (uint64_t)(max_ms > 0 ? max_ms : 0);
}

void http_worker_open_accept(worker_t *w)
{
    http_worker_t *hw = w->http;
    if (!hw || !hw->held)
        return;
    hw->held = 0;
    set_open_to_handoffs(hw, 1);
    resume_accepting(hw);
}

void http_worker_free(worker_t *w)
{
    http_worker_t *hw = w ? w->http : NULL;
    if (!hw)
        return;
    hw->done_called = 1;       /* freeing: no more callbacks */
    int inflight = 0;
    while (hw->conns) {
        inflight += hw->conns->in_flight;
        conn_free(hw->conns);
    }
    if (inflight)
        log_warn("http: worker %d freed with %d request(s) still in flight", w->id, inflight);
    hw_free(hw);
    w->http = NULL;
}

int http_worker_conns(const worker_t *w)
{
    return w && w->http ? nconns(w->http) : 0;
}

/* ==== Query strings ==== */

/* Keys and values are form-decoded (url.h): '+' is a space, a stray '%' stays. */
int http_query_get(const char *query, const char *key, char *out, size_t outlen)
{
    if (!query || !key || !out || outlen == 0)
        return -1;
    size_t klen = strlen(key);
    const char *p = query;
    for (;;) {
        const char *end = p + strcspn(p, "&");
        const char *eq = memchr(p, '=', (size_t)(end - p));
        const char *kend = eq ? eq : end;
        char kbuf[128];
        int kl = kend > p ? url_pct_decode(p, (size_t)(kend - p), kbuf, sizeof kbuf, URL_PCT_FORM) : -1;
        if (kl >= 0 && (size_t)kl == klen && memcmp(kbuf, key, klen) == 0) {
            if (!eq) {
                out[0] = '\0';
                return 0;
            }
            return url_pct_decode(eq + 1, (size_t)(end - eq - 1), out, outlen, URL_PCT_FORM);
        }
        if (*end == '\0')
            return -1;
        p = end + 1;
    }
}

/* bench_load.c -- the load generator of `seckill bench` (bench.h).
 *
 * T threads, each with its own libevent loop and C/T keep-alive connections on raw
 * non-blocking sockets (no bufferevents, no evhttp: a request is a memcpy into the
 * connection's output buffer and one send(2) per batch; answers are read into one
 * buffer per thread and parsed in place by http-parser). Nothing is shared between the
 * threads except their counters, which the main thread reads for the progress line.
 *
 * Who asks next (the schedule, per thread): thread i owns users lo+i, lo+i+T, ...
 *   - every user is asked for once ("first" attempt), in order;
 *   - with probability burst_share a first attempt is sent as `burst` copies at once, on
 *     different connections (concurrent duplicates);
 *   - before each new user, with probability dup/(1+dup), a random user of this thread
 *     who already tried asks again instead (sequential duplicates): dup per user overall.
 *
 * Closed loop (default): each connection keeps `pipeline` requests in flight and sends
 * the next as soon as an answer arrives; latency is measured from the send.
 *
 * Open loop (--rate R): request i of a thread is *due* at t0 + i/r (r = R/T), whether or
 * not the server keeps up. Due requests wait in a backlog until a connection has a free
 * slot, and latency is measured from the due time, not from the send -- so a server that
 * stalls is charged for the whole wait of every request queued behind the stall
 * (no coordinated omission). A timerfd-precise timer armed for the next due time, at
 * most every --tick-us (500 us), sends what fell due since the last tick together (one
 * wake-up for many requests, on both sides); a freed connection takes from the backlog at
 * once. t0 is when every connection is up (at least 100 ms, at most 2 s after the start).
 * Every answer is logged (due, send, answer time, outcome) for the timeline.
 *
 * A connection that fails or closes with requests in flight counts them as unanswered
 * (their outcome is unknown: they may have been admitted) and reconnects after 100 ms;
 * nothing is re-sent. */
#include "cmd/bench.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <event2/event.h>
#include <http_parser.h>

#include "cmd/bench_hist.h"
#include "cmd/bench_timeline.h"
#include "core/clock.h"
#include "core/xmem.h"

#define BODY_MAX 512
#define READ_BUF 65536
#define REQ_MAX 512
#define BACKLOG_MAX (8u << 20)        /* open loop: requests waiting for a connection */
#define RECONNECT_NS 100000000ull
#define TICK_US 10000                 /* housekeeping: reconnects, deadlines, p99 */
#define P99_EVERY_NS 250000000ull
#define OPEN_START_NS 100000000ull    /* open loop: connections get at least 100 ms ... */
#define OPEN_WAIT_NS 2000000000ull    /* ... and at most 2 s to come up before the first is due */
#define REC_MAX (4u << 20)            /* per thread: answers logged for the timeline (64 MB) */

enum { CS_DOWN = 0, CS_CONNECTING, CS_UP };

typedef struct inflight {
    uint32_t user;
    uint8_t kind;
    uint64_t t0;                       /* due (open loop) or send time, ns */
    uint64_t sent;                     /* send time, ns */
} inflight_t;

struct bench_thread;

typedef struct bconn {
    struct bench_thread *t;
    int fd;
    int state;
    struct event *rev, *wev;
    int wev_on, dirty, proto_err, close_after;
    http_parser hp;
    inflight_t *q;                     /* ring of `pipeline` requests in flight */
    unsigned qh, qn;
    char *out;
    size_t olen, ooff, ocap;
    char body[BODY_MAX];
    size_t blen;
    uint64_t retry_at;
} bconn_t;

/* A growing list of users (indexes into the bench's users), one per answer of a kind. */
typedef struct users {
    uint32_t *v;
    size_t n, cap;
} users_t;

typedef struct bench_thread {
    bench_load_t *L;
    int id;
    pthread_t tid;
    struct event_base *base;
    struct event *tick, *pace;
    bconn_t *c;
    int nc;
    bconn_t **dirty;                   /* connections with unsent output */
    int ndirty;
    unsigned depth;
    bench_counters_t *ctr;
    bench_hist_t *hist, *hist_send;
    uint64_t rng;

    uint64_t k_next, nk;               /* schedule: my users are lo + id + T*k, k < nk */
    uint32_t burst_user;
    int burst_left;
    bconn_t *burst_conn;
    int gen_done;
    uint64_t stop_ns;                  /* duration end (0 = none) */
    uint64_t hard_ns;                  /* after gen_done: give up on answers */

    double rate;                       /* open loop, per thread (0 = closed loop) */
    uint64_t t0, issued;
    int nup, armed;                    /* connections up; t0 fixed (all were up, or 2 s) */
    uint64_t start_ns;
    inflight_t *bl;                    /* backlog ring */
    size_t blh, bln, blcap;
    unsigned rr;
    long free_slots;                   /* sum over connected connections of depth - qn */
    int overflow;

    uint64_t first_ns, last_ns, last_progress_ns, p99_at;
    bench_success_t *succ;
    size_t nsucc, capsucc;
    users_t sold;                      /* users answered sold out (the lab's under-sell) */
    users_t maybe;                     /* users answered 503: the order may have been taken */
    bench_rec_t *recs;                 /* JOB_SALE: every answer, for the timeline */
    size_t nrecs, caprecs;
    int recs_full;
    uint64_t unanswered;
    int failed_users;

    char prefix[REQ_MAX];              /* JOB_SALE: the request up to the token */
    size_t prefix_len;
    char rbuf[READ_BUF];
} bench_thread_t;

const char *const bench_outcome_names[BO__COUNT] = {
    [BO_SUCCESS] = "success",         [BO_SOLD_OUT] = "sold out",
    [BO_DUPLICATE] = "duplicate",     [BO_NOT_STARTED] = "not started",
    [BO_ENDED] = "ended",             [BO_NO_VOUCHER] = "no voucher",
    [BO_UNAUTHORIZED] = "401",        [BO_UNAVAILABLE] = "503",
    [BO_OTHER] = "other answer",      [BO_ERROR] = "no answer",
};

/* ==== small helpers ==== */

/* Single-writer counters: a plain add the main thread may read at any time. */
static inline void cadd(_Atomic uint64_t *c, uint64_t n)
{
    atomic_store_explicit(c, atomic_load_explicit(c, memory_order_relaxed) + n,
                          memory_order_relaxed);
}

static inline uint64_t rnd(bench_thread_t *t)
{
    /* xorshift64* */
    uint64_t x = t->rng;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    t->rng = x;
    return x * 0x2545F4914F6CDD1Dull;
}

static inline double rnd01(bench_thread_t *t)
{
    return (double)(rnd(t) >> 11) * (1.0 / 9007199254740992.0);
}

void bench_load_phone(int64_t i, char out[16])
{
    /* 13x and 18x are valid for every x: 2 * 10 * 10^8 distinct phones. */
    int64_t block = i / 100000000, rest = i % 100000000;
    if (i < 0 || block >= 20) {
        block = 0;
        rest = (i < 0 ? -i : i) % 100000000;
    }
    snprintf(out, 16, "1%c%d%08lld", block < 10 ? '3' : '8', (int)(block % 10), (long long)rest);
}

static const void *find(const char *h, size_t n, const char *needle)
{
    return memmem(h, n, needle, strlen(needle));
}

bench_outcome_t bench_load_classify(int status, const char *body, size_t len, int64_t *order_id)
{
    if (status == 401)
        return BO_UNAUTHORIZED;
    if (status == 503)
        return BO_UNAVAILABLE;
    if (status != 200 || !body)
        return BO_OTHER;
    if (find(body, len, "\"success\":true")) {
        const char *p = find(body, len, "\"data\":");
        if (!p)
            return BO_OTHER;
        p += 7;
        const char *end = body + len;
        int64_t v = 0;
        int digits = 0;
        while (p < end && *p >= '0' && *p <= '9' && digits < 19) {
            v = v * 10 + (*p++ - '0');
            digits++;
        }
        if (digits == 0)
            return BO_OTHER;
        if (order_id)
            *order_id = v;
        return BO_SUCCESS;
    }
    static const struct {
        const char *code, *msg;
        bench_outcome_t o;
    } tab[] = {
        {"\"code\":\"SOLD_OUT\"", "库存不足", BO_SOLD_OUT},
        {"\"code\":\"DUPLICATE\"", "不能重复下单", BO_DUPLICATE},
        {"\"code\":\"NOT_STARTED\"", "秒杀尚未开始", BO_NOT_STARTED},
        {"\"code\":\"ENDED\"", "秒杀已经结束", BO_ENDED},
        {"\"code\":\"NO_VOUCHER\"", "优惠券不存在", BO_NO_VOUCHER},
    };
    for (size_t i = 0; i < sizeof tab / sizeof tab[0]; i++)
        if (find(body, len, tab[i].code) || find(body, len, tab[i].msg))
            return tab[i].o;
    return BO_OTHER;
}

/* ==== the schedule ==== */

static inline uint32_t user_of(bench_thread_t *t, uint64_t k)
{
    return t->L->user_lo + (uint32_t)t->id + (uint32_t)(k * (uint64_t)t->L->threads);
}

static void set_gen_done(bench_thread_t *t, uint64_t now)
{
    if (t->gen_done)
        return;
    t->gen_done = 1;
    t->hard_ns = now + (uint64_t)t->L->timeout_s * 1000000000ull;
}

/* The next request of this thread's schedule, for connection c (NULL in open loop). */
static int sched_next(bench_thread_t *t, bconn_t *c, uint32_t *user, uint8_t *kind)
{
    bench_load_t *L = t->L;
    if (t->burst_left > 0) {
        t->burst_left--;
        *user = t->burst_user;
        *kind = K_BURST;
        return 1;
    }
    if (t->gen_done)
        return 0;
    if (t->k_next > 0 && L->dup > 0 && rnd01(t) < L->dup / (1.0 + L->dup)) {
        *user = user_of(t, rnd(t) % t->k_next);
        *kind = K_REPEAT;
        return 1;
    }
    if (t->k_next >= t->nk) {
        set_gen_done(t, clock_mono_ns());
        return 0;
    }
    *user = user_of(t, t->k_next++);
    *kind = K_FIRST;
    if (L->burst > 1 && L->burst_share > 0 && rnd01(t) < L->burst_share) {
        t->burst_user = *user;
        t->burst_left = L->burst - 1;
        t->burst_conn = c;
    }
    return 1;
}

/* ==== requests ==== */

static void out_reserve(bconn_t *c, size_t n)
{
    if (c->olen + n > c->ocap) {
        c->ocap = (c->olen + n) * 2;
        c->out = xrealloc(c->out, c->ocap);
    }
}

static void append(bconn_t *c, const void *p, size_t n)
{
    out_reserve(c, n);
    memcpy(c->out + c->olen, p, n);
    c->olen += n;
}

static void build_request(bench_thread_t *t, bconn_t *c, uint32_t user)
{
    bench_load_t *L = t->L;
    static const char tail[] = "\r\nContent-Length: 0\r\n\r\n";
    char buf[REQ_MAX], phone[16];
    int n;
    switch (L->job) {
    case JOB_SALE:
        out_reserve(c, t->prefix_len + 32 + sizeof tail);
        memcpy(c->out + c->olen, t->prefix, t->prefix_len);
        memcpy(c->out + c->olen + t->prefix_len, L->tokens[user], 32);
        memcpy(c->out + c->olen + t->prefix_len + 32, tail, sizeof tail - 1);
        c->olen += t->prefix_len + 32 + sizeof tail - 1;
        return;
    case JOB_CODE:
        bench_load_phone(L->user_base + user, phone);
        n = snprintf(buf, sizeof buf,
                     "POST /user/code?phone=%s HTTP/1.1\r\nHost: %s\r\nContent-Length: 0\r\n\r\n",
                     phone, L->hosthdr);
        append(c, buf, (size_t)n);
        return;
    case JOB_LOGIN: {
        char body[96];
        bench_load_phone(L->user_base + user, phone);
        int bl = snprintf(body, sizeof body, "{\"phone\":\"%s\",\"code\":\"%s\"}", phone,
                          L->codes[user]);
        n = snprintf(buf, sizeof buf,
                     "POST /user/login HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\n"
                     "Content-Length: %d\r\n\r\n%s",
                     L->hosthdr, bl, body);
        append(c, buf, (size_t)n);
        return;
    }
    }
}

static void push_request(bench_thread_t *t, bconn_t *c, uint32_t user, uint8_t kind, uint64_t t0)
{
    build_request(t, c, user);
    inflight_t *r = &c->q[(c->qh + c->qn) % t->depth];
    r->user = user;
    r->kind = kind;
    r->t0 = t0;
    r->sent = t->L->rate > 0 ? clock_mono_ns() : t0;
    c->qn++;
    t->free_slots--;
    if (!c->dirty)
        t->dirty[t->ndirty++] = c;
    c->dirty = 1;
    cadd(&t->ctr->sent, 1);
    cadd(&t->ctr->by_kind[kind], 1);
    if (!t->first_ns)
        t->first_ns = clock_mono_ns();
}

/* ==== connections ==== */

static void conn_fail(bconn_t *c, uint64_t now);

static int conn_flush(bconn_t *c)
{
    while (c->ooff < c->olen) {
        ssize_t n = send(c->fd, c->out + c->ooff, c->olen - c->ooff, MSG_NOSIGNAL);
        if (n > 0) {
            c->ooff += (size_t)n;
        } else if (n < 0 && errno == EINTR) {
            continue;
        } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            if (!c->wev_on) {
                event_add(c->wev, NULL);
                c->wev_on = 1;
            }
            c->dirty = 0;
            return 0;
        } else {
            conn_fail(c, clock_mono_ns());
            return -1;
        }
    }
    c->olen = c->ooff = 0;
    c->dirty = 0;
    if (c->wev_on) {
        event_del(c->wev);
        c->wev_on = 0;
    }
    return 0;
}

/* Sends what push_request queued, one send(2) per connection. */
static void flush_dirty(bench_thread_t *t)
{
    for (int i = 0; i < t->ndirty; i++)
        if (t->dirty[i]->dirty)
            conn_flush(t->dirty[i]);
    t->ndirty = 0;
}

/* Closed loop: fills c's free slots from the schedule. */
static void conn_fill(bconn_t *c, uint64_t now)
{
    bench_thread_t *t = c->t;
    if (c->state != CS_UP)
        return;
    while (c->qn < t->depth) {
        uint32_t user;
        uint8_t kind;
        /* Leave a burst's copies to the other connections, so they really are concurrent. */
        if (t->burst_left > 0 && t->burst_conn == c && t->nc > 1)
            break;
        if (!sched_next(t, c, &user, &kind))
            break;
        push_request(t, c, user, kind, now);
    }
}

/* Open loop: everything due by now goes into the backlog... */
static void openloop_generate(bench_thread_t *t, uint64_t now)
{
    if (t->gen_done && t->burst_left == 0)
        return;
    if (!t->armed) {
        /* The crowd is at the door before the sale opens: the first request falls due
         * once every connection is up, so no accept burst is charged to the sale. */
        if (now < t->t0 || (t->nup < t->nc && now < t->start_ns + OPEN_WAIT_NS))
            return;
        t->t0 = now;
        if (t->stop_ns)
            t->stop_ns = now + (uint64_t)(t->L->duration_s * 1e9);
        t->armed = 1;
    }
    uint64_t due = (uint64_t)((double)(now - t->t0) * t->rate / 1e9) + 1;
    while (t->issued < due) {
        uint32_t user;
        uint8_t kind;
        if (!sched_next(t, NULL, &user, &kind))
            break;
        if (t->bln == t->blcap) {
            if (t->blcap >= BACKLOG_MAX) {
                /* The server is so far behind that the backlog would not fit: stop. */
                t->overflow = 1;
                set_gen_done(t, now);
                t->burst_left = 0;
                break;
            }
            size_t ncap = t->blcap ? t->blcap * 2 : 4096;
            inflight_t *nb = xrealloc(NULL, ncap * sizeof *nb);
            for (size_t i = 0; i < t->bln; i++)
                nb[i] = t->bl[(t->blh + i) % t->blcap];
            free(t->bl);
            t->bl = nb;
            t->blh = 0;
            t->blcap = ncap;
        }
        inflight_t *r = &t->bl[(t->blh + t->bln) % t->blcap];
        r->user = user;
        r->kind = kind;
        r->t0 = t->t0 + (uint64_t)((double)t->issued * 1e9 / t->rate);
        t->bln++;
        t->issued++;
    }
    atomic_store_explicit(&t->ctr->backlog, t->bln, memory_order_relaxed);
}

/* ... and leaves it one request at a time, round robin over connections with a free
 * slot (so a burst's copies land on different connections). */
static void openloop_dispatch(bench_thread_t *t)
{
    int idle_scans = 0;
    while (t->bln > 0 && t->free_slots > 0 && idle_scans < t->nc) {
        bconn_t *c = &t->c[t->rr];
        t->rr = (t->rr + 1) % (unsigned)t->nc;
        if (c->state != CS_UP || c->qn >= t->depth) {
            idle_scans++;
            continue;
        }
        idle_scans = 0;
        inflight_t r = t->bl[t->blh];
        t->blh = (t->blh + 1) % t->blcap;
        t->bln--;
        push_request(t, c, r.user, r.kind, r.t0);
    }
    flush_dirty(t);
    atomic_store_explicit(&t->ctr->backlog, t->bln, memory_order_relaxed);
}

static void users_push(users_t *u, uint32_t user)
{
    if (u->n == u->cap) {
        u->cap = u->cap ? u->cap * 2 : 4096;
        u->v = xrealloc(u->v, u->cap * sizeof *u->v);
    }
    u->v[u->n++] = user;
}

/* The threads' sold-out (which 0) or 503 (which 1) lists in one array, never NULL;
 * returns its length. */
static size_t users_merge(const bench_load_t *L, int which, uint32_t **out)
{
    size_t total = 0, n = 0;
    for (int i = 0; i < L->threads; i++)
        total += (which ? &L->th[i].maybe : &L->th[i].sold)->n;
    *out = xrealloc(NULL, (total ? total : 1) * sizeof **out);
    for (int i = 0; i < L->threads; i++) {
        const users_t *u = which ? &L->th[i].maybe : &L->th[i].sold;
        if (u->n)
            memcpy(*out + n, u->v, u->n * sizeof **out);
        n += u->n;
    }
    return n;
}

/* us since the load's origin, as the timeline stores it */
static inline uint32_t since_origin(const bench_load_t *L, uint64_t ns)
{
    uint64_t us = ns > L->origin_ns ? (ns - L->origin_ns) / 1000 : 0;
    return us > UINT32_MAX ? UINT32_MAX : (uint32_t)us;
}

static void log_answer(bench_thread_t *t, const inflight_t *r, uint64_t now, bench_outcome_t o)
{
    if (t->nrecs == t->caprecs) {
        if (t->caprecs >= REC_MAX) {
            t->recs_full = 1;
            return;
        }
        t->caprecs = t->caprecs ? t->caprecs * 2 : 65536;
        t->recs = xrealloc(t->recs, t->caprecs * sizeof *t->recs);
    }
    bench_rec_t *x = &t->recs[t->nrecs++];
    x->due_us = since_origin(t->L, r->t0);
    x->send_us = since_origin(t->L, r->sent);
    x->done_us = since_origin(t->L, now);
    x->outcome = (uint8_t)o;
}

static void on_response(bconn_t *c, uint64_t now)
{
    bench_thread_t *t = c->t;
    bench_load_t *L = t->L;
    if (c->qn == 0) {
        c->proto_err = 1;   /* an answer nobody asked for */
        return;
    }
    inflight_t *r = &c->q[c->qh];
    c->qh = (c->qh + 1) % t->depth;
    c->qn--;
    t->free_slots++;
    int status = (int)c->hp.status_code;
    uint64_t lat = now > r->t0 ? (now - r->t0) / 1000 : 0;
    if (t->hist_send)
        bench_hist_record(t->hist_send, now > r->sent ? (now - r->sent) / 1000 : 0);
    t->last_ns = now;
    t->last_progress_ns = now;
    if (L->job == JOB_SALE) {
        int64_t oid = 0;
        bench_outcome_t o = bench_load_classify(status, c->body, c->blen, &oid);
        cadd(&t->ctr->out[o], 1);
        bench_hist_record(t->hist, lat);
        log_answer(t, r, now, o);
        if (o == BO_SUCCESS) {
            if (t->nsucc == t->capsucc) {
                t->capsucc = t->capsucc ? t->capsucc * 2 : 4096;
                t->succ = xrealloc(t->succ, t->capsucc * sizeof *t->succ);
            }
            t->succ[t->nsucc].order_id = oid;
            t->succ[t->nsucc].user = r->user;
            t->nsucc++;
        } else if (o == BO_SOLD_OUT) {
            users_push(&t->sold, r->user);
        } else if (o == BO_UNAVAILABLE) {
            users_push(&t->maybe, r->user);
        }
        return;
    }
    int ok = status == 200 && find(c->body, c->blen, "\"success\":true");
    if (ok && L->job == JOB_LOGIN) {
        const char *p = find(c->body, c->blen, "\"data\":\"");
        ok = p && (size_t)(c->body + c->blen - (p + 8)) >= 33 && p[8 + 32] == '"';
        if (ok) {
            memcpy(L->tokens[r->user], p + 8, 32);
            L->tokens[r->user][32] = '\0';
        }
    }
    cadd(&t->ctr->out[ok ? BO_SUCCESS : BO_OTHER], 1);
    bench_hist_record(t->hist, lat);
    if (!ok) {
        if (t->failed_users++ < 3)
            fprintf(stderr, "seckill bench: %s for user %u: HTTP %d %.*s\n",
                    L->job == JOB_CODE ? "POST /user/code" : "POST /user/login", r->user, status,
                    (int)(c->blen > 200 ? 200 : c->blen), c->body);
    }
}

static int hp_begin(http_parser *p)
{
    bconn_t *c = p->data;
    c->blen = 0;
    return 0;
}

static int hp_body(http_parser *p, const char *at, size_t n)
{
    bconn_t *c = p->data;
    size_t room = BODY_MAX - c->blen;
    if (n > room)
        n = room;
    memcpy(c->body + c->blen, at, n);
    c->blen += n;
    return 0;
}

static int hp_complete(http_parser *p)
{
    bconn_t *c = p->data;
    on_response(c, clock_mono_ns());
    if (!http_should_keep_alive(p))
        c->close_after = 1;
    return 0;
}

static const http_parser_settings hp_settings = {
    .on_message_begin = hp_begin,
    .on_body = hp_body,
    .on_message_complete = hp_complete,
};

static void conn_close(bconn_t *c)
{
    if (c->rev) {
        event_free(c->rev);
        c->rev = NULL;
    }
    if (c->wev) {
        event_free(c->wev);
        c->wev = NULL;
    }
    if (c->fd >= 0) {
        close(c->fd);
        c->fd = -1;
    }
    c->wev_on = 0;
    c->state = CS_DOWN;
}

/* Drops the connection; whatever was in flight is unanswered. */
static void conn_fail(bconn_t *c, uint64_t now)
{
    bench_thread_t *t = c->t;
    if (c->qn > 0) {
        t->unanswered += c->qn;
        cadd(&t->ctr->out[BO_ERROR], c->qn);
        if (t->L->job != JOB_SALE)
            t->failed_users += (int)c->qn;
    }
    if (c->state != CS_DOWN)
        cadd(&t->ctr->conn_failures, 1);
    if (c->state == CS_UP) {
        t->free_slots -= (long)(t->depth - c->qn);
        t->nup--;
    }
    c->qn = 0;
    c->qh = 0;
    c->olen = c->ooff = 0;
    c->dirty = 0;
    conn_close(c);
    c->retry_at = now + RECONNECT_NS;
}

static void on_read(evutil_socket_t fd, short what, void *arg);
static void on_write(evutil_socket_t fd, short what, void *arg);

static void after_io(bench_thread_t *t, bconn_t *c, uint64_t now)
{
    if (t->rate > 0) {
        /* A freed connection takes what is already waiting; what falls due meanwhile
         * goes out with its tick (--tick-us), all of the tick's requests together. */
        if (t->bln > 0 || t->L->tick_us <= 100)
            openloop_generate(t, now);
        openloop_dispatch(t);
    } else {
        conn_fill(c, now);
        flush_dirty(t);
    }
}

static void on_read(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    bconn_t *c = arg;
    bench_thread_t *t = c->t;
    ssize_t n = recv(c->fd, t->rbuf, sizeof t->rbuf, 0);
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
        return;
    uint64_t now = clock_mono_ns();
    if (n <= 0) {
        conn_fail(c, now);   /* closed by the server (or an error) */
        return;
    }
    size_t done = http_parser_execute(&c->hp, &hp_settings, t->rbuf, (size_t)n);
    if (done != (size_t)n || HTTP_PARSER_ERRNO(&c->hp) != HPE_OK || c->proto_err) {
        if (c->qn > 0 || c->proto_err)
            fprintf(stderr, "seckill bench: bad HTTP answer (%s); reconnecting\n",
                    c->proto_err ? "unexpected answer"
                                 : http_errno_description(HTTP_PARSER_ERRNO(&c->hp)));
        conn_fail(c, now);
        return;
    }
    if (c->close_after) {
        conn_fail(c, now);
        return;
    }
    after_io(t, c, now);
}

static void conn_connect(bconn_t *c, uint64_t now)
{
    bench_thread_t *t = c->t;
    bench_load_t *L = t->L;
    /* --also-target: every other connection goes to the second instance. */
    int second = L->addrlen2 && ((c - t->c) + t->id) % 2 == 1;
    const struct sockaddr_storage *addr = second ? &L->addr2 : &L->addr;
    socklen_t addrlen = second ? L->addrlen2 : L->addrlen;
    c->fd = socket(addr->ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (c->fd < 0) {
        c->retry_at = now + RECONNECT_NS;
        return;
    }
    int one = 1;
    setsockopt(c->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    http_parser_init(&c->hp, HTTP_RESPONSE);
    c->hp.data = c;
    c->proto_err = c->close_after = 0;
    c->rev = event_new(t->base, c->fd, EV_READ | EV_PERSIST, on_read, c);
    c->wev = event_new(t->base, c->fd, EV_WRITE | EV_PERSIST, on_write, c);
    if (!c->rev || !c->wev) {
        conn_close(c);
        c->retry_at = now + RECONNECT_NS;
        return;
    }
    int rc = connect(c->fd, (const struct sockaddr *)addr, addrlen);
    if (rc < 0 && errno != EINPROGRESS) {
        conn_close(c);
        c->retry_at = now + RECONNECT_NS;
        cadd(&t->ctr->conn_failures, 1);
        return;
    }
    c->state = CS_CONNECTING;
    event_add(c->wev, NULL);
    c->wev_on = 1;
}

static void on_write(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    bconn_t *c = arg;
    bench_thread_t *t = c->t;
    uint64_t now = clock_mono_ns();
    if (c->state == CS_CONNECTING) {
        int err = 0;
        socklen_t len = sizeof err;
        if (getsockopt(c->fd, SOL_SOCKET, SO_ERROR, &err, &len) < 0 || err != 0) {
            conn_close(c);
            c->retry_at = now + RECONNECT_NS;
            cadd(&t->ctr->conn_failures, 1);
            return;
        }
        c->state = CS_UP;
        t->free_slots += t->depth;
        t->nup++;
        event_del(c->wev);
        c->wev_on = 0;
        event_add(c->rev, NULL);
        cadd(&t->ctr->connects, 1);
        t->last_progress_ns = now;
        after_io(t, c, now);
        return;
    }
    conn_flush(c);
}

/* ==== the thread ==== */

static int all_idle(bench_thread_t *t)
{
    if (t->bln > 0 || t->burst_left > 0)
        return 0;
    for (int i = 0; i < t->nc; i++)
        if (t->c[i].qn > 0)
            return 0;
    return 1;
}

static void on_tick(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    bench_thread_t *t = arg;
    bench_load_t *L = t->L;
    uint64_t now = clock_mono_ns();
    if (!t->gen_done && t->stop_ns && now >= t->stop_ns) {
        set_gen_done(t, now);
        t->burst_left = 0;
    }
    int up = 0;
    for (int i = 0; i < t->nc; i++) {
        bconn_t *c = &t->c[i];
        if (c->state == CS_UP)
            up++;
        else if (c->state == CS_DOWN && now >= c->retry_at && !(t->gen_done && all_idle(t)))
            conn_connect(c, now);
    }
    if (t->rate > 0) {
        openloop_generate(t, now);
        openloop_dispatch(t);
    } else {
        for (int i = 0; i < t->nc; i++)
            conn_fill(&t->c[i], now);
        flush_dirty(t);
    }
    /* Nobody answers and no connection can be made: give up rather than spin. */
    if (!up && now - t->last_progress_ns > (uint64_t)L->timeout_s * 1000000000ull) {
        if (!t->gen_done)
            fprintf(stderr, "seckill bench: thread %d: no connection to %s for %d s; giving up\n",
                    t->id, L->hosthdr, L->timeout_s);
        set_gen_done(t, now);
        t->burst_left = 0;
        t->bln = 0;
    }
    if (now >= t->p99_at) {
        atomic_store_explicit(&t->ctr->p99_us, bench_hist_percentile(t->hist, 99),
                              memory_order_relaxed);
        t->p99_at = now + P99_EVERY_NS;
    }
    if (t->gen_done && all_idle(t)) {
        event_base_loopbreak(t->base);
        return;
    }
    if (t->gen_done && now >= t->hard_ns) {
        /* Answers that never came: count them and stop waiting. */
        for (int i = 0; i < t->nc; i++)
            if (t->c[i].qn > 0)
                conn_fail(&t->c[i], now);
        t->unanswered += t->bln;
        t->bln = 0;
        event_base_loopbreak(t->base);
    }
}

/* Open loop: issue what has become due (cheap: no scan of the connections), then sleep
 * until the next request is due -- but at least --tick-us, so at high rates one wake-up
 * sends several (each still timed from its own due time). */
static void on_pace(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    bench_thread_t *t = arg;
    uint64_t now = clock_mono_ns();
    openloop_generate(t, now);
    openloop_dispatch(t);
    if (t->gen_done && t->burst_left == 0)
        return;
    uint64_t next = t->t0 + (uint64_t)((double)t->issued * 1e9 / t->rate);
    uint64_t wait = next > now ? next - now : 0;
    if (wait < (uint64_t)t->L->tick_us * 1000ull)
        wait = (uint64_t)t->L->tick_us * 1000ull;
    struct timeval tv = {(time_t)(wait / 1000000000ull), (suseconds_t)(wait % 1000000000ull / 1000)};
    event_add(t->pace, &tv);
}

static void *thread_main(void *arg)
{
    bench_thread_t *t = arg;
    char name[16];
    snprintf(name, sizeof name, "bench%d", t->id);   /* the timeline's thread groups */
    pthread_setname_np(pthread_self(), name);
    uint64_t now = clock_mono_ns();
    t->last_progress_ns = now;
    for (int i = 0; i < t->nc; i++)
        conn_connect(&t->c[i], now);
    struct timeval tv = {0, TICK_US}, pv = {0, t->L->tick_us};
    event_add(t->tick, &tv);
    if (t->pace)
        event_add(t->pace, &pv);
    event_base_dispatch(t->base);
    for (int i = 0; i < t->nc; i++)
        conn_close(&t->c[i]);
    atomic_store_explicit(&t->ctr->p99_us, bench_hist_percentile(t->hist, 99),
                          memory_order_relaxed);
    atomic_fetch_sub(&t->L->running, 1);
    return NULL;
}

static void thread_free(bench_thread_t *t)
{
    if (!t)
        return;
    for (int i = 0; t->c && i < t->nc; i++) {
        conn_close(&t->c[i]);
        free(t->c[i].q);
        free(t->c[i].out);
    }
    free(t->c);
    if (t->tick)
        event_free(t->tick);
    if (t->pace)
        event_free(t->pace);
    free(t->dirty);
    if (t->base)
        event_base_free(t->base);
    free(t->bl);
    free(t->succ);
    free(t->sold.v);
    free(t->maybe.v);
    free(t->recs);
}

static int thread_init(bench_load_t *L, bench_thread_t *t, int id, uint64_t start, char *err,
                       size_t errlen)
{
    t->L = L;
    t->id = id;
    t->ctr = &L->ctr[id];
    t->hist = L->hist[id];
    t->hist_send = L->hist_send ? L->hist_send[id] : NULL;
    t->depth = (unsigned)L->pipeline;
    t->rng = (L->seed ^ (0x9E3779B97F4A7C15ull * (uint64_t)(id + 1))) | 1;
    uint64_t nusers = L->user_hi - L->user_lo;
    t->nk = nusers > (uint64_t)id ? (nusers - (uint64_t)id + (uint64_t)L->threads - 1) /
                                        (uint64_t)L->threads
                                  : 0;
    t->nc = L->conns / L->threads + (id < L->conns % L->threads ? 1 : 0);
    if (t->nc < 1)
        t->nc = 1;
    if (L->rate > 0) {
        t->rate = L->rate / L->threads;
        t->t0 = start + OPEN_START_NS;
        t->start_ns = start;
    }
    if (L->duration_s > 0)
        t->stop_ns = start + (uint64_t)(L->duration_s * 1e9) + (L->rate > 0 ? OPEN_START_NS : 0);
    if (L->job == JOB_SALE) {
        int n = snprintf(t->prefix, sizeof t->prefix,
                         "POST /voucher-order/seckill/%lld HTTP/1.1\r\nHost: %s\r\n"
                         "authorization: ",
                         (long long)L->voucher, L->hosthdr);
        if (n < 0 || (size_t)n >= sizeof t->prefix) {
            snprintf(err, errlen, "host name too long");
            return -1;
        }
        t->prefix_len = (size_t)n;
    }
    struct event_config *cfg = event_config_new();
    if (cfg) {
        event_config_set_flag(cfg, EVENT_BASE_FLAG_NOLOCK);
        event_config_set_flag(cfg, EVENT_BASE_FLAG_PRECISE_TIMER);
        t->base = event_base_new_with_config(cfg);
        event_config_free(cfg);
    }
    if (!t->base) {
        snprintf(err, errlen, "cannot create an event loop");
        return -1;
    }
    t->tick = event_new(t->base, -1, EV_PERSIST, on_tick, t);
    if (L->rate > 0)
        t->pace = event_new(t->base, -1, 0, on_pace, t);
    t->dirty = xrealloc(NULL, (size_t)t->nc * sizeof *t->dirty);
    t->c = xrealloc(NULL, (size_t)t->nc * sizeof *t->c);
    memset(t->c, 0, (size_t)t->nc * sizeof *t->c);
    for (int i = 0; i < t->nc; i++) {
        t->c[i].t = t;
        t->c[i].fd = -1;
        t->c[i].q = xrealloc(NULL, t->depth * sizeof(inflight_t));
    }
    if (!t->tick || (L->rate > 0 && !t->pace)) {
        snprintf(err, errlen, "cannot create a timer");
        return -1;
    }
    return 0;
}

int bench_load_run(bench_load_t *L, void (*progress)(bench_load_t *L, double elapsed_s, void *arg),
                   void *arg, char *err, size_t errlen)
{
    if (L->threads < 1)
        L->threads = 1;
    if (L->conns < L->threads)
        L->conns = L->threads;
    if (L->pipeline < 1)
        L->pipeline = 1;
    if (L->timeout_s < 1)
        L->timeout_s = 10;
    if (L->tick_us < 50)
        L->tick_us = 100;
    int T = L->threads;
    L->ctr = xrealloc(NULL, (size_t)T * sizeof *L->ctr);
    memset(L->ctr, 0, (size_t)T * sizeof *L->ctr);
    L->hist = xrealloc(NULL, (size_t)T * sizeof *L->hist);
    for (int i = 0; i < T; i++)
        L->hist[i] = bench_hist_new();
    if (L->rate > 0 && L->job == JOB_SALE) {
        L->hist_send = xrealloc(NULL, (size_t)T * sizeof *L->hist_send);
        for (int i = 0; i < T; i++)
            L->hist_send[i] = bench_hist_new();
    }
    L->th = xrealloc(NULL, (size_t)T * sizeof *L->th);
    memset(L->th, 0, (size_t)T * sizeof *L->th);
    uint64_t start = clock_mono_ns();
    L->origin_ns = start;
    for (int i = 0; i < T; i++)
        if (thread_init(L, &L->th[i], i, start, err, errlen) < 0)
            return -1;
    atomic_store(&L->running, T);
    int started = 0;
    for (; started < T; started++)
        if (pthread_create(&L->th[started].tid, NULL, thread_main, &L->th[started]) != 0) {
            snprintf(err, errlen, "cannot start a thread: %s", strerror(errno));
            break;
        }
    uint64_t every = (uint64_t)(L->progress_ms > 0 ? L->progress_ms : 1000) * 1000000ull;
    uint64_t next = start + every;
    while (atomic_load(&L->running) > T - started) {
        struct timespec ts = {0, 20000000L};
        nanosleep(&ts, NULL);
        uint64_t now = clock_mono_ns();
        if (progress && now >= next) {
            progress(L, (double)(now - start) / 1e9, arg);
            next += every;
        }
    }
    for (int i = 0; i < started; i++)
        pthread_join(L->th[i].tid, NULL);
    if (started < T)
        return -1;
    /* Gather. */
    L->nsucc = 0;
    L->unanswered = 0;
    L->failed_users = 0;
    L->t_first_ns = L->t_last_ns = 0;
    size_t total = 0;
    for (int i = 0; i < T; i++)
        total += L->th[i].nsucc;
    L->succ = xrealloc(NULL, (total ? total : 1) * sizeof *L->succ);
    L->nsoldout = users_merge(L, 0, &L->soldout);
    L->nmaybe = users_merge(L, 1, &L->maybe);
    size_t trecs = 0;
    for (int i = 0; i < T; i++)
        trecs += L->th[i].nrecs;
    L->recs = xrealloc(NULL, (trecs ? trecs : 1) * sizeof *L->recs);
    L->nrecs = 0;
    L->recs_truncated = 0;
    for (int i = 0; i < T; i++) {
        bench_thread_t *t = &L->th[i];
        if (t->nsucc)
            memcpy(L->succ + L->nsucc, t->succ, t->nsucc * sizeof *t->succ);
        L->nsucc += t->nsucc;
        if (t->nrecs)
            memcpy(L->recs + L->nrecs, t->recs, t->nrecs * sizeof *t->recs);
        L->nrecs += t->nrecs;
        L->recs_truncated |= t->recs_full;
        L->unanswered += t->unanswered;
        L->failed_users += t->failed_users;
        if (t->overflow)
            fprintf(stderr, "seckill bench: thread %d: more than %u requests waited for a "
                            "connection; the rate was not sustained and the run was cut short\n",
                    i, BACKLOG_MAX);
        if (t->first_ns && (!L->t_first_ns || t->first_ns < L->t_first_ns))
            L->t_first_ns = t->first_ns;
        if (t->last_ns > L->t_last_ns)
            L->t_last_ns = t->last_ns;
    }
    return 0;
}

void bench_load_free(bench_load_t *L)
{
    if (L->th)
        for (int i = 0; i < L->threads; i++)
            thread_free(&L->th[i]);
    free(L->th);
    L->th = NULL;
    if (L->hist)
        for (int i = 0; i < L->threads; i++)
            bench_hist_free(L->hist[i]);
    free(L->hist);
    L->hist = NULL;
    if (L->hist_send)
        for (int i = 0; i < L->threads; i++)
            bench_hist_free(L->hist_send[i]);
    free(L->hist_send);
    L->hist_send = NULL;
    free(L->ctr);
    L->ctr = NULL;
    free(L->succ);
    L->succ = NULL;
    L->nsucc = 0;
    free(L->soldout);
    L->soldout = NULL;
    L->nsoldout = 0;
    free(L->maybe);
    L->maybe = NULL;
    L->nmaybe = 0;
    free(L->recs);
    L->recs = NULL;
    L->nrecs = 0;
}

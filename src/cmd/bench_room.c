/* bench_room.c -- `seckill bench --waiting-room` (bench_room.h): join, poll, buy with the
 * pass, for up to a million simulated buyers; then the fairness figures and the audit.
 *
 * Each thread owns the buyers i with i % threads == its id and a few keep-alive
 * connections; a binary heap orders its buyers by the time their next request is due.
 * A free connection takes the earliest due buyer, sends one request and, once the answer
 * is in, files the buyer's next step. Buyers holding a pass wait in a heap of their own,
 * served first: a real buyer orders at once on its own connection, and behind a backlog
 * of due polls (a server slower than the schedule) the pass would expire in the queue. A
 * pass valid from a later moment (passFrom) is filed for that moment, and its buyer polls
 * no more. Blocking poll(2) over the thread's connections: the load is answers per second,
 * not connections. The admission order is when the passes become valid (the server's
 * passFrom), not when the client saw them. */
#include "cmd/bench.h"
#include "cmd/bench_room.h"

#include <errno.h>
#include <math.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <http_parser.h>

#include "cmd/audit.h"
#include "cmd/html_report.h"
#include "core/clock.h"
#include "core/xmem.h"
#include "room/pow.h"

/* ==== the pure parts ==== */

static uint64_t mix64(uint64_t x)
{
    /* splitmix64's finaliser: one buyer's plan from (seed, index) alone */
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

static double unit(uint64_t x)
{
    return (double)(x >> 11) * (1.0 / 9007199254740992.0);
}

void bench_room_plan(uint64_t seed, uint32_t buyer, double early_share, double slow_share,
                     int64_t begin_ms, uint32_t late_span_ms, bench_room_plan_t *out)
{
    uint64_t a = mix64(seed ^ ((uint64_t)buyer << 1 | 1));
    uint64_t b = mix64(a), c = mix64(b);
    out->early = begin_ms > 0 && unit(a) < early_share;
    out->slow = unit(c) < slow_share;
    double at = out->early ? unit(b) * (double)begin_ms * 0.9
                           : (double)(begin_ms > 0 ? begin_ms : 0) + unit(b) * late_span_ms;
    out->join_ms = (uint32_t)at;
}

typedef struct rank_ix {
    double v;
    size_t i;
} rank_ix_t;

static int cmp_rank(const void *a, const void *b)
{
    double x = ((const rank_ix_t *)a)->v, y = ((const rank_ix_t *)b)->v;
    return x < y ? -1 : x > y;
}

/* Ranks (1-based, ties averaged) of v into r. */
static void ranks(const double *v, size_t n, double *r)
{
    rank_ix_t *t = xcalloc(n, sizeof *t);
    for (size_t i = 0; i < n; i++)
        t[i] = (rank_ix_t){v[i], i};
    qsort(t, n, sizeof *t, cmp_rank);
    for (size_t i = 0; i < n;) {
        size_t j = i;
        while (j + 1 < n && t[j + 1].v == t[i].v)
            j++;
        double avg = (double)(i + j) / 2 + 1;
        for (size_t k = i; k <= j; k++)
            r[t[k].i] = avg;
        i = j + 1;
    }
    free(t);
}

double bench_room_spearman(const double *x, const double *y, size_t n)
{
    if (n < 2)
        return 0;
    double *rx = xcalloc(n, sizeof *rx), *ry = xcalloc(n, sizeof *ry);
    ranks(x, n, rx);
    ranks(y, n, ry);
    /* Pearson's correlation of the ranks: right with ties too */
    double mx = 0, my = 0, sxy = 0, sxx = 0, syy = 0;
    for (size_t i = 0; i < n; i++) {
        mx += rx[i];
        my += ry[i];
    }
    mx /= (double)n;
    my /= (double)n;
    for (size_t i = 0; i < n; i++) {
        sxy += (rx[i] - mx) * (ry[i] - my);
        sxx += (rx[i] - mx) * (rx[i] - mx);
        syy += (ry[i] - my) * (ry[i] - my);
    }
    free(rx);
    free(ry);
    return sxx > 0 && syy > 0 ? sxy / sqrt(sxx * syy) : 0;
}

/* The value after "name": in body, or NULL. */
static const char *member(const char *body, const char *name)
{
    char pat[64];
    int n = snprintf(pat, sizeof pat, "\"%s\":", name);
    if (n < 0 || (size_t)n >= sizeof pat)
        return NULL;
    const char *p = strstr(body, pat);
    return p ? p + n : NULL;
}

int bench_room_jnum(const char *body, const char *name, double *out)
{
    const char *p = member(body, name);
    char *end;
    if (!p)
        return 0;
    double v = strtod(p, &end);
    if (end == p)
        return 0;
    *out = v;
    return 1;
}

int bench_room_jstr(const char *body, const char *name, char *out, size_t n)
{
    const char *p = member(body, name);
    if (!p || *p != '"' || n == 0)
        return 0;
    p++;
    const char *q = strchr(p, '"');
    if (!q || (size_t)(q - p) >= n)
        return 0;
    memcpy(out, p, (size_t)(q - p));
    out[q - p] = '\0';
    return 1;
}

int bench_room_pass_from(const char *body, int pass_ttl_s, int64_t *from_ms)
{
    char state[32] = "";
    double v = 0;
    bench_room_jstr(body, "state", state, sizeof state);
    if (strcmp(state, "admitted") != 0 && strcmp(state, "waiting") != 0)
        return 0;
    /* only whether there is one: the pass itself is read by the caller */
    if (strstr(body, "\"pass\":\"") == NULL)
        return 0;
    if (bench_room_jnum(body, "passFrom", &v) && v > 0)
        *from_ms = (int64_t)v;
    else if (bench_room_jnum(body, "passExpiresAt", &v) && v > 0)
        *from_ms = (int64_t)v - (int64_t)pass_ttl_s * 1000;
    else
        return 0;
    return 1;
}

uint32_t bench_room_buy_delay(int64_t from_ms, int64_t wall_now_ms)
{
    int64_t d = from_ms - wall_now_ms;
    return d <= 0 ? 0 : d > UINT32_MAX / 2 ? UINT32_MAX / 2 : (uint32_t)d;
}

/* ==== the run ==== */

enum { ST_CHAL = 0, ST_JOIN, ST_POLL, ST_BUY, ST_DONE };
enum { END_NONE = 0, END_BOUGHT, END_SOLD_OUT, END_REFUSED, END_GAVE_UP };

typedef struct buyer {
    uint32_t join_at;             /* plan: ms after the start */
    uint32_t poll_ms;             /* the last pollAfterMs */
    int64_t join_seq;             /* order of the join answers (all threads), -1: none */
    int64_t admit_ms;             /* wall ms the pass becomes valid (the server's), -1: none */
    char *extra;                  /* ST_JOIN with a gate: "challenge\0solution"; ST_BUY: the pass */
    uint8_t stage, end, early, slow, tries;
} buyer_t;

typedef struct conn {
    int fd;
    uint32_t buyer;               /* in flight */
    int busy;
    uint64_t sent_ms;
    http_parser hp;
    bench_resp_t resp;
} conn_t;

typedef struct room_run room_run_t;

typedef struct room_heap {
    uint64_t *v;                  /* due << 32 | buyer */
    size_t n;
} room_heap_t;

typedef struct room_thread {
    room_run_t *R;
    int id;
    pthread_t th;
    room_heap_t wait, buy;        /* due buyers: joins and polls; orders with a pass */
    conn_t *conns;
    int nconns;
    bench_success_t *succ;
    size_t nsucc, capsucc;
    uint32_t *soldout;
    size_t nsoldout, capsoldout;
    uint64_t req[4], rl429, errors, rejoin, pass_refused, chal_refused, solve_tries;
    uint64_t buy_late_sum, buy_late_max, nbuys;   /* orders sent after their due time, ms */
} room_thread_t;

struct room_run {
    const bench_opts_t *o;
    const bench_load_t *P;
    const bench_users_t *u;
    int64_t vid;
    uint64_t start_ms;            /* monotonic */
    int64_t wall_start_ms;
    buyer_t *b;
    size_t n;
    _Atomic int64_t join_seq;
    _Atomic size_t done;
    _Atomic int stop;
    room_thread_t *t;
};

static void heap_push(room_heap_t *h, uint32_t due, uint32_t buyer)
{
    size_t i = h->n++;
    uint64_t v = (uint64_t)due << 32 | buyer;
    while (i > 0 && h->v[(i - 1) / 2] > v) {
        h->v[i] = h->v[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    h->v[i] = v;
}

static uint64_t heap_pop(room_heap_t *h)
{
    uint64_t top = h->v[0], v = h->v[--h->n];
    size_t i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= h->n)
            break;
        if (c + 1 < h->n && h->v[c + 1] < h->v[c])
            c++;
        if (h->v[c] >= v)
            break;
        h->v[i] = h->v[c];
        i = c;
    }
    if (h->n > 0)
        h->v[i] = v;
    return top;
}

/* The heap whose top is due by now, the buys' first; NULL when none is. */
static room_heap_t *due_heap(room_thread_t *t, uint32_t now)
{
    if (t->buy.n > 0 && (uint32_t)(t->buy.v[0] >> 32) <= now)
        return &t->buy;
    if (t->wait.n > 0 && (uint32_t)(t->wait.v[0] >> 32) <= now)
        return &t->wait;
    return NULL;
}

/* The earliest due time of both heaps (they are not both empty). */
static uint32_t next_due(const room_thread_t *t)
{
    uint32_t a = t->buy.n > 0 ? (uint32_t)(t->buy.v[0] >> 32) : UINT32_MAX;
    uint32_t b = t->wait.n > 0 ? (uint32_t)(t->wait.v[0] >> 32) : UINT32_MAX;
    return a < b ? a : b;
}

static uint32_t now_rel(const room_run_t *R)
{
    return (uint32_t)(clock_mono_ms() - R->start_ms);
}

/* Files buyer i's next request delay ms from now (the slow class later still). */
static void again(room_thread_t *t, uint32_t i, uint32_t delay)
{
    buyer_t *b = &t->R->b[i];
    heap_push(b->stage == ST_BUY ? &t->buy : &t->wait,
              now_rel(t->R) + delay + (b->slow ? (uint32_t)t->R->o->room_slow_ms : 0), i);
}

static void finish(room_thread_t *t, uint32_t i, int end)
{
    buyer_t *b = &t->R->b[i];
    b->stage = ST_DONE;
    b->end = (uint8_t)end;
    free(b->extra);
    b->extra = NULL;
    atomic_fetch_add(&t->R->done, 1);
}

static const http_parser_settings parser_settings = {
    .on_body = bench_resp_on_body,
    .on_message_complete = bench_resp_on_complete,
};

static int conn_open(room_thread_t *t, conn_t *c)
{
    const bench_load_t *P = t->R->P;
    c->fd = socket(P->addr.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (c->fd < 0)
        return -1;
    struct timeval tv = {5, 0};
    setsockopt(c->fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    if (connect(c->fd, (const struct sockaddr *)&P->addr, P->addrlen) < 0) {
        close(c->fd);
        c->fd = -1;
        return -1;
    }
    return 0;
}

static void conn_drop(conn_t *c)
{
    if (c->fd >= 0)
        close(c->fd);
    c->fd = -1;
    c->busy = 0;
}

/* Builds buyer i's request for its stage into buf: its length, or -1. */
static int build(room_thread_t *t, uint32_t i, char *buf, size_t n)
{
    const room_run_t *R = t->R;
    const buyer_t *b = &R->b[i];
    const char *tok = R->u->tokens[i], *host = R->P->hosthdr;
    long long vid = (long long)R->vid;
    switch (b->stage) {
    case ST_CHAL:
        return snprintf(buf, n,
                        "GET /seckill/challenge/%lld HTTP/1.1\r\nHost: %s\r\nauthorization: %s\r\n\r\n",
                        vid, host, tok);
    case ST_JOIN: {
        char body[POW_CHALLENGE_MAX + 64] = "{}";
        if (b->extra)
            snprintf(body, sizeof body, "{\"challenge\":\"%s\",\"solution\":\"%s\"}", b->extra,
                     b->extra + strlen(b->extra) + 1);
        return snprintf(buf, n,
                        "POST /seckill/queue/%lld HTTP/1.1\r\nHost: %s\r\nauthorization: %s\r\n"
                        "Content-Type: application/json\r\nContent-Length: %zu\r\n\r\n%s",
                        vid, host, tok, strlen(body), body);
    }
    case ST_POLL:
        return snprintf(buf, n,
                        "GET /seckill/queue/%lld HTTP/1.1\r\nHost: %s\r\nauthorization: %s\r\n\r\n",
                        vid, host, tok);
    case ST_BUY:
        return snprintf(buf, n,
                        "POST /voucher-order/seckill/%lld HTTP/1.1\r\nHost: %s\r\nauthorization: %s\r\n"
                        "x-seckill-pass: %s\r\nContent-Length: 0\r\n\r\n",
                        vid, host, tok, b->extra ? b->extra : "");
    }
    return -1;
}

static void push_succ(room_thread_t *t, uint32_t i, int64_t order_id)
{
    if (t->nsucc == t->capsucc) {
        t->capsucc = t->capsucc ? 2 * t->capsucc : 1024;
        t->succ = xrealloc(t->succ, t->capsucc * sizeof *t->succ);
    }
    t->succ[t->nsucc++] = (bench_success_t){order_id, i};
}

static void push_soldout(room_thread_t *t, uint32_t i)
{
    if (t->nsoldout == t->capsoldout) {
        t->capsoldout = t->capsoldout ? 2 * t->capsoldout : 1024;
        t->soldout = xrealloc(t->soldout, t->capsoldout * sizeof *t->soldout);
    }
    t->soldout[t->nsoldout++] = i;
}

/* A failed request: try again a little later, at most 20 times. */
static void retry(room_thread_t *t, uint32_t i, uint32_t delay)
{
    buyer_t *b = &t->R->b[i];
    t->errors++;
    if (++b->tries > 20)
        finish(t, i, END_GAVE_UP);
    else
        again(t, i, delay);
}

/* The state in an answer to a join or a poll. */
static void on_queue_state(room_thread_t *t, uint32_t i, const char *body)
{
    buyer_t *b = &t->R->b[i];
    char state[32] = "", pass[512];
    double v;
    if (bench_room_jnum(body, "pollAfterMs", &v) && v >= 0 && v < 600000)
        b->poll_ms = (uint32_t)v;
    bench_room_jstr(body, "state", state, sizeof state);
    int64_t from_ms = 0;
    if (bench_room_pass_from(body, t->R->o->room_pass_ttl_s, &from_ms) &&
        bench_room_jstr(body, "pass", pass, sizeof pass)) {
        /* admitted, or a pass valid from the place's due moment: order at its start, no
         * more polls */
        b->admit_ms = from_ms;
        free(b->extra);
        b->extra = xstrdup(pass);
        b->stage = ST_BUY;
        b->tries = 0;
        again(t, i, bench_room_buy_delay(from_ms, (int64_t)clock_wall_ms()));
    } else if (strcmp(state, "soldOut") == 0) {
        push_soldout(t, i);
        finish(t, i, END_SOLD_OUT);
    } else if (strcmp(state, "notQueued") == 0) {
        t->rejoin++;
        b->stage = t->R->o->room_bot_gate ? ST_CHAL : ST_JOIN;
        again(t, i, 0);
    } else {
        b->stage = ST_POLL;
        again(t, i, b->poll_ms ? b->poll_ms : 1000);
    }
}

static void on_answer(room_thread_t *t, conn_t *c)
{
    uint32_t i = c->buyer;
    buyer_t *b = &t->R->b[i];
    const char *body = c->resp.body;
    int ok = strstr(body, "\"success\":true") != NULL;
    if (c->resp.status == 429) {
        t->rl429++;
        again(t, i, b->poll_ms ? b->poll_ms : 1000);
        return;
    }
    switch (b->stage) {
    case ST_CHAL: {
        char ch[POW_CHALLENGE_MAX], sol[24];
        double d = 0;
        if (!ok || !bench_room_jstr(body, "challenge", ch, sizeof ch) ||
            !bench_room_jnum(body, "difficulty", &d)) {
            retry(t, i, 500);
            return;
        }
        uint64_t tries = pow_solve(ch, (int)d, 0, UINT64_C(1) << 36, sol, sizeof sol);
        t->solve_tries += tries;
        size_t lc = strlen(ch), ls = strlen(sol);
        free(b->extra);
        b->extra = xcalloc(1, lc + ls + 2);
        memcpy(b->extra, ch, lc);
        memcpy(b->extra + lc + 1, sol, ls);
        b->stage = ST_JOIN;
        again(t, i, 0);
        return;
    }
    case ST_JOIN:
        if (ok) {
            b->join_seq = atomic_fetch_add(&t->R->join_seq, 1);
            free(b->extra);
            b->extra = NULL;
            on_queue_state(t, i, body);
        } else if (strstr(body, "CHALLENGE_REQUIRED")) {
            t->chal_refused++;
            b->stage = ST_CHAL;
            retry(t, i, 0);
        } else if (strstr(body, "SOLD_OUT") || strstr(body, "库存不足")) {
            push_soldout(t, i);
            finish(t, i, END_SOLD_OUT);
        } else if (strstr(body, "秒杀已经结束") || strstr(body, "NO_QUEUE")) {
            finish(t, i, END_REFUSED);
        } else {
            retry(t, i, 500);
        }
        return;
    case ST_POLL:
        if (ok)
            on_queue_state(t, i, body);
        else
            retry(t, i, 500);
        return;
    case ST_BUY: {
        int64_t oid = 0;
        bench_outcome_t out = bench_load_classify(c->resp.status, body, c->resp.blen, &oid);
        if (out == BO_SUCCESS) {
            push_succ(t, i, oid);
            finish(t, i, END_BOUGHT);
        } else if (out == BO_SOLD_OUT) {
            push_soldout(t, i);
            finish(t, i, END_SOLD_OUT);
        } else if (strstr(body, "QUEUE_REQUIRED")) {
            t->pass_refused++;
            finish(t, i, END_REFUSED);
        } else if (out == BO_DUPLICATE || out == BO_ENDED) {
            finish(t, i, END_REFUSED);
        } else {
            retry(t, i, 200);
        }
        return;
    }
    }
}

static int send_next(room_thread_t *t, conn_t *c, uint32_t i)
{
    char req[2048];
    int n = build(t, i, req, sizeof req);
    if (n < 0 || (size_t)n >= sizeof req)
        return -1;
    if (c->fd < 0 && conn_open(t, c) < 0)
        return -1;
    if (send(c->fd, req, (size_t)n, MSG_NOSIGNAL) != n) {
        conn_drop(c);
        return -1;
    }
    t->req[t->R->b[i].stage]++;
    c->buyer = i;
    c->busy = 1;
    c->resp.status = c->resp.done = 0;
    c->resp.blen = 0;
    c->resp.body[0] = '\0';
    c->sent_ms = clock_mono_ms();
    http_parser_init(&c->hp, HTTP_RESPONSE);
    c->hp.data = &c->resp;
    return 0;
}

static void *thread_main(void *arg)
{
    room_thread_t *t = arg;
    room_run_t *R = t->R;
    struct pollfd *pf = xcalloc((size_t)t->nconns, sizeof *pf);
    int timeout_ms = R->o->timeout_s * 1000;
    while (!atomic_load(&R->stop)) {
        uint32_t now = now_rel(R);
        int busy = 0;
        for (int k = 0; k < t->nconns; k++) {
            conn_t *c = &t->conns[k];
            room_heap_t *h = c->busy ? NULL : due_heap(t, now);
            if (h != NULL) {
                uint64_t v = heap_pop(h);
                uint32_t i = (uint32_t)v, late = now - (uint32_t)(v >> 32);
                if (R->b[i].stage == ST_BUY) {
                    t->buy_late_sum += late;
                    t->nbuys++;
                    if (late > t->buy_late_max)
                        t->buy_late_max = late;
                }
                if (send_next(t, c, i) < 0)
                    retry(t, i, 200);
            }
            busy += c->busy;
        }
        if (busy == 0 && t->wait.n == 0 && t->buy.n == 0)
            break;
        int wait = 50;
        if (t->wait.n > 0 || t->buy.n > 0) {
            uint32_t due = next_due(t);
            wait = due > now ? (int)(due - now) : 0;
            if (wait > 50)
                wait = 50;
            if (busy == t->nconns)
                wait = 50;
        }
        for (int k = 0; k < t->nconns; k++) {
            pf[k].fd = t->conns[k].busy ? t->conns[k].fd : -1;
            pf[k].events = POLLIN;
            pf[k].revents = 0;
        }
        if (poll(pf, (nfds_t)t->nconns, wait) < 0 && errno != EINTR)
            break;
        uint64_t mono = clock_mono_ms();
        for (int k = 0; k < t->nconns; k++) {
            conn_t *c = &t->conns[k];
            if (!c->busy)
                continue;
            if (pf[k].revents) {
                char buf[4096];
                ssize_t r = recv(c->fd, buf, sizeof buf, MSG_DONTWAIT);
                if (r > 0) {
                    http_parser_execute(&c->hp, &parser_settings, buf, (size_t)r);
                    if (c->resp.done) {
                        c->busy = 0;
                        if (!http_should_keep_alive(&c->hp))
                            conn_drop(c);
                        on_answer(t, c);
                    } else if (c->hp.http_errno != HPE_OK) {
                        conn_drop(c);
                        retry(t, c->buyer, 200);
                    }
                    continue;
                }
                if (r < 0 && (errno == EAGAIN || errno == EINTR))
                    continue;
                conn_drop(c);
                retry(t, c->buyer, 200);
            } else if (mono - c->sent_ms > (uint64_t)timeout_ms) {
                conn_drop(c);
                retry(t, c->buyer, 200);
            }
        }
    }
    for (int k = 0; k < t->nconns; k++)
        conn_drop(&t->conns[k]);
    free(pf);
    return NULL;
}

/* ==== the report ==== */

typedef struct room_stats {
    size_t joined, admitted, bought, soldout, refused, gave_up;
    double rho_early, rho_late;
    size_t n_early, n_late;
    size_t buyers_fast, buyers_slow, pass_fast, pass_slow;    /* early joiners */
    double rate, first_s, last_s;
    uint64_t req[4], rl429, errors, rejoin, pass_refused, chal_refused, solve_tries;
    uint64_t buy_late_sum, buy_late_max, nbuys;
} room_stats_t;

/* Correlation between join order and issue order among the admitted early (or late) ones. */
static double rho_of(const room_run_t *R, int early, size_t *count)
{
    double *x = xcalloc(R->n + 1, sizeof *x), *y = xcalloc(R->n + 1, sizeof *y);
    size_t m = 0;
    for (size_t i = 0; i < R->n; i++) {
        const buyer_t *b = &R->b[i];
        if (b->early == early && b->join_seq >= 0 && b->admit_ms >= 0) {
            x[m] = (double)b->join_seq;
            y[m] = (double)b->admit_ms;
            m++;
        }
    }
    double rho = bench_room_spearman(x, y, m);
    free(x);
    free(y);
    *count = m;
    return rho;
}

static void stats_of(const room_run_t *R, room_stats_t *s)
{
    memset(s, 0, sizeof *s);
    int64_t lo = INT64_MAX, hi = INT64_MIN;
    for (size_t i = 0; i < R->n; i++) {
        const buyer_t *b = &R->b[i];
        s->joined += b->join_seq >= 0;
        s->bought += b->end == END_BOUGHT;
        s->soldout += b->end == END_SOLD_OUT;
        s->refused += b->end == END_REFUSED;
        s->gave_up += b->end == END_GAVE_UP || b->end == END_NONE;
        if (b->early) {
            s->buyers_slow += b->slow;
            s->buyers_fast += !b->slow;
        }
        if (b->admit_ms < 0)
            continue;
        s->admitted++;
        if (b->early) {
            s->pass_slow += b->slow;
            s->pass_fast += !b->slow;
        }
        lo = b->admit_ms < lo ? b->admit_ms : lo;
        hi = b->admit_ms > hi ? b->admit_ms : hi;
    }
    if (s->admitted > 1 && hi > lo) {
        /* passes issued per second between the first and the last: n - 1 intervals */
        s->rate = (double)(s->admitted - 1) / ((double)(hi - lo) / 1000);
        s->first_s = (double)(lo - R->wall_start_ms) / 1000;
        s->last_s = (double)(hi - R->wall_start_ms) / 1000;
    }
    s->rho_early = rho_of(R, 1, &s->n_early);
    s->rho_late = rho_of(R, 0, &s->n_late);
    for (int k = 0; k < R->o->threads; k++) {
        const room_thread_t *t = &R->t[k];
        for (int j = 0; j < 4; j++)
            s->req[j] += t->req[j];
        s->rl429 += t->rl429;
        s->errors += t->errors;
        s->rejoin += t->rejoin;
        s->pass_refused += t->pass_refused;
        s->chal_refused += t->chal_refused;
        s->solve_tries += t->solve_tries;
        s->buy_late_sum += t->buy_late_sum;
        s->nbuys += t->nbuys;
        if (t->buy_late_max > s->buy_late_max)
            s->buy_late_max = t->buy_late_max;
    }
}

static double share(size_t a, size_t b)
{
    return a + b ? (double)a / (double)(a + b) : 0;
}

static void print_stats(FILE *f, const room_run_t *R, const room_stats_t *s, double secs)
{
    const bench_opts_t *o = R->o;
    fprintf(f, "seckill bench --waiting-room: voucher %lld, %zu buyers, R = %d/s, pass %d s%s\n",
            (long long)R->vid, R->n, o->room_rate, o->room_pass_ttl_s,
            o->room_bot_gate ? ", bot gate" : "");
    fprintf(f, "  run         %.2f s; requests: %llu challenge, %llu join, %llu poll, %llu buy; "
               "%llu answered 429, %llu failed\n", secs,
            (unsigned long long)s->req[ST_CHAL], (unsigned long long)s->req[ST_JOIN],
            (unsigned long long)s->req[ST_POLL], (unsigned long long)s->req[ST_BUY],
            (unsigned long long)s->rl429, (unsigned long long)s->errors);
    fprintf(f, "  buyers      %zu joined, %zu admitted, %zu bought, %zu told sold out, "
               "%zu refused, %zu gave up\n", s->joined, s->admitted, s->bought, s->soldout,
            s->refused, s->gave_up);
    fprintf(f, "  rate        %.1f passes/s between %.2f s and %.2f s (R = %d/s: %.2f of it)\n",
            s->rate, s->first_s, s->last_s, o->room_rate, o->room_rate ? s->rate / o->room_rate : 0);
    /* the load generator's own queueing: an order sent late spends its pass's life */
    fprintf(f, "  orders      sent %.1f ms after they were due on average, %llu ms at most "
               "(the bench's backlog; the pass lives %d s)\n",
            s->nbuys ? (double)s->buy_late_sum / (double)s->nbuys : 0.0,
            (unsigned long long)s->buy_late_max, o->room_pass_ttl_s);
    fprintf(f, "  order       Spearman(join, admission): early joiners %.3f (n = %zu), "
               "late joiners %.3f (n = %zu)\n", s->rho_early, s->n_early, s->rho_late, s->n_late);
    fprintf(f, "  classes     early joiners: fast %.3f of buyers, %.3f of passes; slow (+%d ms) "
               "%.3f of buyers, %.3f of passes\n", share(s->buyers_fast, s->buyers_slow),
            share(s->pass_fast, s->pass_slow), o->room_slow_ms,
            share(s->buyers_slow, s->buyers_fast), share(s->pass_slow, s->pass_fast));
    if (s->pass_refused || s->chal_refused || s->rejoin)
        fprintf(f, "  refusals    %llu orders with a pass refused (QUEUE_REQUIRED), %llu "
                   "joins refused (CHALLENGE_REQUIRED), %llu rejoins\n",
                (unsigned long long)s->pass_refused, (unsigned long long)s->chal_refused,
                (unsigned long long)s->rejoin);
    if (s->solve_tries)
        fprintf(f, "  bot gate    %llu hashes solved by the bench\n",
                (unsigned long long)s->solve_tries);
}

static void json_stats(FILE *f, const room_run_t *R, const room_stats_t *s, double secs,
                       int audit_status)
{
    const bench_opts_t *o = R->o;
    fprintf(f, "{\"waitingRoom\":{\"voucher\":%lld,\"buyers\":%zu,\"admitPerSecond\":%d,"
               "\"passTtlS\":%d,\"botGate\":%s,\"seconds\":%.3f,"
               "\"requests\":{\"challenge\":%llu,\"join\":%llu,\"poll\":%llu,\"buy\":%llu,"
               "\"rateLimited\":%llu,\"failed\":%llu},"
               "\"joined\":%zu,\"admitted\":%zu,\"bought\":%zu,\"soldOut\":%zu,\"refused\":%zu,"
               "\"gaveUp\":%zu,\"passesRefused\":%llu,\"admissionRate\":%.3f,"
               "\"rateShareOfR\":%.4f,\"spearmanEarly\":%.4f,\"earlyAdmitted\":%zu,"
               "\"spearmanLate\":%.4f,\"lateAdmitted\":%zu,"
               "\"early\":{\"fastBuyers\":%zu,\"slowBuyers\":%zu,\"fastPasses\":%zu,"
               "\"slowPasses\":%zu,\"fastPassShare\":%.4f,\"fastBuyerShare\":%.4f},"
               "\"slowMs\":%d,\"solveHashes\":%llu,"
               "\"orderLateMs\":{\"mean\":%.1f,\"max\":%llu},\"audit\":%d}}\n",
            (long long)R->vid, R->n, o->room_rate, o->room_pass_ttl_s,
            o->room_bot_gate ? "true" : "false", secs, (unsigned long long)s->req[ST_CHAL],
            (unsigned long long)s->req[ST_JOIN], (unsigned long long)s->req[ST_POLL],
            (unsigned long long)s->req[ST_BUY], (unsigned long long)s->rl429,
            (unsigned long long)s->errors, s->joined, s->admitted, s->bought, s->soldout,
            s->refused, s->gave_up, (unsigned long long)s->pass_refused, s->rate,
            o->room_rate ? s->rate / o->room_rate : 0, s->rho_early, s->n_early, s->rho_late,
            s->n_late, s->buyers_fast, s->buyers_slow, s->pass_fast, s->pass_slow,
            share(s->pass_fast, s->pass_slow), share(s->buyers_fast, s->buyers_slow),
            o->room_slow_ms, (unsigned long long)s->solve_tries,
            s->nbuys ? (double)s->buy_late_sum / (double)s->nbuys : 0.0,
            (unsigned long long)s->buy_late_max, audit_status);
}

/* Drain, then the audit with every order answer and sold-out answer the buyers saw. */
static int audit_room(const room_run_t *R, int64_t stock, int created, FILE *out)
{
    const bench_opts_t *o = R->o;
    if (!o->audit || !o->redis_url[0] || !o->db_url[0]) {
        fprintf(out, "  audit       skipped%s\n", o->audit ? ": needs --redis and --db" : "");
        return -1;
    }
    size_t na = 0, ns = 0;
    for (int k = 0; k < o->threads; k++) {
        na += R->t[k].nsucc;
        ns += R->t[k].nsoldout;
    }
    audit_answer_t *ans = xcalloc(na + 1, sizeof *ans);
    int64_t *so = xcalloc(ns + 1, sizeof *so);
    na = ns = 0;
    for (int k = 0; k < o->threads; k++) {
        const room_thread_t *t = &R->t[k];
        for (size_t j = 0; j < t->nsucc; j++)
            ans[na++] = (audit_answer_t){t->succ[j].order_id, R->u->user_ids[t->succ[j].user]};
        for (size_t j = 0; j < t->nsoldout; j++)
            so[ns++] = R->u->user_ids[t->soldout[j]];
    }
    char err[512];
    audit_drain_t dr;
    int status = 2;
    if (audit_wait_drain(o->redis_url, o->db_url, R->vid, o->drain_timeout_s * 1000, &dr, err,
                         sizeof err) < 0) {
        fprintf(stderr, "seckill bench: waiting for the order writer: %s\n", err);
    } else {
        audit_opts_t ao = {
            .redis_url = o->redis_url, .db_url = o->db_url, .vouchers = &R->vid,
            .nvouchers = 1, .initial_stock = stock, .answers = ans, .nanswers = na,
            .have_answers = 1, .answers_complete = created, .soldout_users = so,
            .nsoldout = ns, .mode = o->audit_mode[0] ? o->audit_mode : NULL,
            .wait_drain_ms = 1, .out = out,
        };
        status = audit_run(&ao);
    }
    free(ans);
    free(so);
    return status;
}

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

/* --html: the run as a page -- the passes by the moment they became valid against R's line
 * from the first one (the rate, and any gap), then the report and the audit as printed. */
static int write_page(const room_run_t *R, const char *report, const char *audit,
                      int audit_status, char *err, size_t errlen)
{
    const bench_opts_t *o = R->o;
    FILE *f = fopen(o->html, "w");
    if (f == NULL) {
        snprintf(err, errlen, "%s: %s", o->html, strerror(errno));
        return -1;
    }
    char title[640];
    snprintf(title, sizeof title, "seckill bench --waiting-room: %s, voucher %lld", o->target,
             (long long)R->vid);
    if (html_report_begin(f, title, err, errlen) < 0) {
        fclose(f);
        remove(o->html);
        return -1;
    }
    bench_html_verdict(f, audit_status);
    size_t m = 0;
    int64_t *at = xcalloc(R->n + 1, sizeof *at);
    for (size_t i = 0; i < R->n; i++)
        if (R->b[i].admit_ms >= 0)
            at[m++] = R->b[i].admit_ms;
    qsort(at, m, sizeof *at, cmp_i64);
    char *csv = NULL;
    size_t len = 0;
    FILE *c = open_memstream(&csv, &len);
    if (c == NULL)
        abort();   /* out of memory, like xmem.h */
    fputs("seconds from the first pass,passes valid,R x t\n", c);
    size_t step = m / 2000 + 1;   /* at most ~2,000 points for the browser, and the last */
    for (size_t i = 0; i < m; i = i + step < m || i + 1 == m ? i + step : m - 1) {
        double t = (double)(at[i] - at[0]) / 1000;
        fprintf(c, "%.3f,%zu,%.1f\n", t, i + 1, 1 + t * o->room_rate);
    }
    fclose(c);
    free(at);
    html_report_csv_chart(f, "Passes by the moment they became valid (passFrom), against R",
                          "passes", csv);
    free(csv);
    html_report_text(f, "Report, as printed:");
    html_report_pre(f, report);
    if (audit != NULL && *audit) {
        html_report_text(f, "Audit, as printed:");
        html_report_pre(f, audit);
    }
    html_report_end(f);
    if (fclose(f) != 0) {
        snprintf(err, errlen, "%s: %s", o->html, strerror(errno));
        return -1;
    }
    return 0;
}

int bench_room_run(const bench_opts_t *o, const bench_load_t *P, const bench_users_t *u,
                   int64_t vid, int64_t stock, int64_t begin_s, int created)
{
    room_run_t R;
    memset(&R, 0, sizeof R);
    R.o = o;
    R.P = P;
    R.u = u;
    R.vid = vid;
    R.n = u->n;
    R.b = xcalloc(R.n + 1, sizeof *R.b);
    R.t = xcalloc((size_t)o->threads, sizeof *R.t);
    R.start_ms = clock_mono_ms();
    R.wall_start_ms = (int64_t)clock_wall_ms();
    int64_t begin_ms = begin_s > 0 ? begin_s * 1000 - R.wall_start_ms : 0;
    for (int k = 0; k < o->threads; k++) {
        room_thread_t *t = &R.t[k];
        t->R = &R;
        t->id = k;
        t->wait.v = xcalloc(R.n / (size_t)o->threads + 2, sizeof *t->wait.v);
        t->buy.v = xcalloc(R.n / (size_t)o->threads + 2, sizeof *t->buy.v);
        t->nconns = o->conns / o->threads + (k < o->conns % o->threads ? 1 : 0);
        if (t->nconns < 1)
            t->nconns = 1;
        t->conns = xcalloc((size_t)t->nconns, sizeof *t->conns);
        for (int c = 0; c < t->nconns; c++)
            t->conns[c].fd = -1;
    }
    for (size_t i = 0; i < R.n; i++) {
        bench_room_plan_t pl;
        bench_room_plan(o->seed, (uint32_t)i, o->room_early, o->room_slow, begin_ms,
                        (uint32_t)o->room_late_s * 1000, &pl);
        buyer_t *b = &R.b[i];
        b->join_at = pl.join_ms;
        b->early = (uint8_t)pl.early;
        b->slow = (uint8_t)pl.slow;
        b->join_seq = b->admit_ms = -1;
        b->stage = o->room_bot_gate ? ST_CHAL : ST_JOIN;
        room_thread_t *t = &R.t[i % (size_t)o->threads];
        heap_push(&t->wait, b->join_at + (b->slow ? (uint32_t)o->room_slow_ms : 0), (uint32_t)i);
    }
    int started = 0;
    for (int k = 0; k < o->threads; k++)
        if (pthread_create(&R.t[k].th, NULL, thread_main, &R.t[k]) == 0)
            started++;
        else
            break;
    uint64_t deadline = o->duration_s > 0 ? R.start_ms + (uint64_t)(o->duration_s * 1000) : 0;
    while (atomic_load(&R.done) < R.n && started == o->threads) {
        struct timespec ts = {0, 200 * 1000000L};
        nanosleep(&ts, NULL);   /* the progress line's pace, not a synchronisation */
        if (deadline && clock_mono_ms() > deadline)
            break;
        if (o->progress)
            fprintf(stderr, "\r  %.1f s: %zu of %zu buyers done   ",
                    (double)(clock_mono_ms() - R.start_ms) / 1000, atomic_load(&R.done), R.n);
    }
    atomic_store(&R.stop, 1);
    for (int k = 0; k < started; k++)
        pthread_join(R.t[k].th, NULL);
    if (o->progress)
        fprintf(stderr, "\n");
    double secs = (double)(clock_mono_ms() - R.start_ms) / 1000;

    FILE *hout = strcmp(o->json, "-") == 0 ? stderr : stdout;
    room_stats_t s;
    stats_of(&R, &s);
    /* --html keeps the texts for the page as well: printed from memory */
    char *rep_text = NULL, *aud_text = NULL;
    size_t rep_len = 0, aud_len = 0;
    FILE *rep = o->html[0] ? open_memstream(&rep_text, &rep_len) : NULL;
    FILE *aud = o->html[0] ? open_memstream(&aud_text, &aud_len) : NULL;
    print_stats(rep ? rep : hout, &R, &s, secs);
    int status = started == o->threads ? audit_room(&R, stock, created, aud ? aud : hout) : 2;
    if (rep != NULL) {
        fclose(rep);
        fputs(rep_text, hout);
    }
    if (aud != NULL) {
        fclose(aud);
        fputs(aud_text, hout);
    }
    if (o->html[0]) {
        char err[600];
        if (write_page(&R, rep_text ? rep_text : "", aud_text, status, err, sizeof err) < 0) {
            fprintf(stderr, "seckill bench: %s\n", err);
            status = 2;
        } else {
            fprintf(hout, "  html        %s\n", o->html);
        }
    }
    free(rep_text);
    free(aud_text);
    if (o->json[0]) {
        FILE *jf = strcmp(o->json, "-") == 0 ? stdout : fopen(o->json, "w");
        if (!jf) {
            fprintf(stderr, "seckill bench: %s: %s\n", o->json, strerror(errno));
            status = 2;
        } else {
            json_stats(jf, &R, &s, secs, status);
            if (jf != stdout)
                fclose(jf);
        }
    }
    for (size_t i = 0; i < R.n; i++)
        free(R.b[i].extra);
    for (int k = 0; k < o->threads; k++) {
        free(R.t[k].wait.v);
        free(R.t[k].buy.v);
        free(R.t[k].conns);
        free(R.t[k].succ);
        free(R.t[k].soldout);
    }
    free(R.t);
    free(R.b);
    return status < 0 ? 0 : status;
}

/* fuzz_http.c -- bytes off the wire through the real HTTP front end, router and handlers.
 *
 * The input goes into one end of a socketpair; the other end is handed to http.c as an
 * accepted connection (conn_new), so parsing, limits, pipelining, keep-alive, lingering
 * close and the reply path all run exactly as in the server, driven by the worker's
 * libevent loop. The handler is the real router (api_dispatch): handlers run against
 * the stand-ins of fuzz_common.h, which answer "Redis down" (or a logged-in user) at once
 * or later from the loop, and run SQL jobs without a database.
 *
 * http.c is #included here for its static conn_new (seam: none in http.c itself); the
 * service's copy of http.o is then not linked.
 *
 * Input: byte 0 = flags, the rest = what the client sends.
 *   bit 0  Redis and jobs answer later, from the loop (else at once)
 *   bit 1  jobs run (else the job queue is full)
 *   bit 2  every Redis command gets a login hash {id:7,...} (else: Redis down) ...
 *   bit 3  ... and the admission script answers 0 "admitted" (else 1 "sold out")
 *   bits 4-7  s: the client sends in pieces of s*s*16 bytes (s = 0: all at once)
 * Checks: the connection is always freed once the client has sent everything and shut
 * down its side; nothing hangs; the server only ever writes HTTP/1.1 responses; every
 * byte charged to the request-buffer budget is given back when the connection goes (a
 * leak would pile up over a process's life until every request got 503); no handler
 * replies twice (fuzz_common.c); ASan/UBSan/LSan see nothing.
 *
 * "Hangs" counts loop turns and time together: a handler may wait on a timer (the
 * cache-aside poll, cacheaside.h, up to 1.5 s), and a million non-blocking turns take
 * less than that on a fast machine. So the server has stopped for good only after
 * STUCK_TURNS turns and STUCK_MS, which is longer than any timer a handler waits on and
 * shorter than the CI's -timeout=10, so the report says what stopped. */
#include "http/http.c"

#include <time.h>

#include <hiredis/hiredis.h>

#include "api/api.h"
#include "fuzz_common.h"

#define STUCK_TURNS 1000000L
#define STUCK_MS 5000

static uint64_t mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/* Turn i of a loop that began at t0: has the server stopped for good? */
static int stuck(long i, uint64_t t0)
{
    return i > STUCK_TURNS && mono_ms() - t0 > STUCK_MS;
}

static redisReply *user_reply, *admit_ok, *admit_soldout;

static http_worker_t *setup(void)
{
    static const char *const extra[] = {
        "--token-cache-ms", "0", "--soldout-cache-ms", "0",      /* no state across inputs */
        "--rate-user-seckill", "1000000/s:1000000", "--rate-ip-seckill", "1000000/s:1000000",
        "--rate-ip-code", "1000000/s:1000000", "--rate-phone-code", "1000000/s:1000000",
        "--rate-phone-login", "1000000/s:1000000", "--rate-ip-login", "1000000/s:1000000",
        "--max-header-bytes", "4096", "--max-body-bytes", "8192", NULL
    };
    fz_env_t *e = fz_env(extra);
    if (e->w->http == NULL) {
        char err[256];
        if (http_worker_init(e->w, "127.0.0.1", 0, api_dispatch, err, sizeof(err)) != 0) {
            fprintf(stderr, "fuzz_http: %s\n", err);
            abort();
        }
        static const char hash[] =
            "*6\r\n$2\r\nid\r\n$1\r\n7\r\n$8\r\nnickName\r\n$4\r\nfuzz\r\n$4\r\nicon\r\n$0\r\n\r\n";
        size_t used;
        user_reply = fz_parse_resp((const uint8_t *)hash, sizeof(hash) - 1, &used);
        admit_ok = fz_parse_resp((const uint8_t *)":0\r\n", 4, &used);
        admit_soldout = fz_parse_resp((const uint8_t *)":1\r\n", 4, &used);
        if (user_reply == NULL || admit_ok == NULL || admit_soldout == NULL) {
            abort();
        }
    }
    return e->w->http;
}

/* Reads what the server wrote; checks that it is HTTP responses. */
static void read_replies(int fd, size_t *total, char *head, size_t headcap)
{
    char buf[65536];
    static int dump = -1;
    if (dump < 0) {
        dump = getenv("FUZZ_DUMP") != NULL;   /* FUZZ_DUMP=1: the replies to stderr */
    }
    for (;;) {
        ssize_t n = recv(fd, buf, sizeof(buf), 0);
        if (n <= 0) {
            return;
        }
        if (dump) {
            fwrite(buf, 1, (size_t)n, stderr);
        }
        for (ssize_t i = 0; i < n && *total + (size_t)i < headcap; i++) {
            head[*total + (size_t)i] = buf[i];
        }
        *total += (size_t)n;
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    http_worker_t *hw = setup();
    if (size < 1) {
        return 0;
    }
    unsigned flags = data[0];
    data++;
    size--;
    fz_async = flags & 1;
    fz_jobs_run = (flags >> 1) & 1;
    fz_reply = (flags & 4) ? user_reply : NULL;
    fz_eval_reply = (flags & 4) ? ((flags & 8) ? admit_ok : admit_soldout) : NULL;
    unsigned s = flags >> 4;
    size_t chunk = s == 0 ? size : (size_t)s * s * 16;
    if (chunk == 0) {
        chunk = 1;
    }

    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, sv) != 0) {
        abort();
    }
    struct sockaddr_storage ss;
    memset(&ss, 0, sizeof(ss));
    struct sockaddr_in *sin = (struct sockaddr_in *)&ss;
    sin->sin_family = AF_INET;
    sin->sin_addr.s_addr = htonl(0x7f000001);
    conn_new(hw, sv[0], &ss);
    if (hw->conns == NULL) {
        abort();
    }

    char head[16];
    size_t out = 0, sent = 0;
    int peer_gone = 0;
    uint64_t t0 = mono_ms();
    for (long i = 0; sent < size && !peer_gone; i++) {
        if (stuck(i, t0)) {
            fprintf(stderr, "fuzz_http: the server stopped reading for good\n");
            abort();
        }
        size_t want = size - sent < chunk ? size - sent : chunk;
        ssize_t n = send(sv[1], data + sent, want, MSG_NOSIGNAL);
        if (n > 0) {
            sent += (size_t)n;
        } else if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
            peer_gone = 1;   /* the server closed the connection */
        }
        event_base_loop(hw->w->base, EVLOOP_NONBLOCK);
        read_replies(sv[1], &out, head, sizeof(head));
    }
    shutdown(sv[1], SHUT_WR);
    t0 = mono_ms();
    for (long i = 0; hw->conns != NULL; i++) {
        if (stuck(i, t0)) {
            fprintf(stderr, "fuzz_http: connection never freed after the client finished\n");
            abort();
        }
        event_base_loop(hw->w->base, EVLOOP_NONBLOCK);
        read_replies(sv[1], &out, head, sizeof(head));
    }
    if (atomic_load(&buffered_total) != 0) {
        fprintf(stderr, "fuzz_http: %zu request-buffer bytes still charged after the "
                "connection was freed\n", (size_t)atomic_load(&buffered_total));
        abort();
    }
    fz_drain();   /* nothing may be left behind */
    read_replies(sv[1], &out, head, sizeof(head));
    close(sv[1]);
    if (out > 0 && (out < 9 || memcmp(head, "HTTP/1.1 ", 9) != 0)) {
        fprintf(stderr, "fuzz_http: the server wrote something that is not a response\n");
        abort();
    }
    return 0;
}

/* bench.h -- `seckill bench`: rehearse a flash sale against any deployment over the public
 * HTTP API, measure it, then prove with the audit that nothing went wrong.
 *
 * Files:
 *   bench.c        options, voucher set-up, the run, the report, drain + audit
 *   bench_load.c   the load generator: libevent loops on raw non-blocking sockets,
 *                  responses parsed with http-parser, closed or open loop
 *   bench_users.c  user preparation: API login, direct token seeding, a tokens file
 *   bench_hist.c   latency histogram; bench_redis.c blocking Redis helpers
 *   bench_life.c   the lifecycle rehearsal after the sale: pays, cancels, timeouts
 *   bench_timeline.c  the answers cut into 100 ms slots and the sale's two phases
 *   bench_outcome.h   a request's outcome, shared with the timeline
 *
 * The public entry is bench_main(); the rest of this header is shared by the bench_*.c
 * files and the unit tests (bench_parse_args is pure). */
#ifndef SECKILL_BENCH_H
#define SECKILL_BENCH_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/socket.h>

#include "cmd/bench_outcome.h"

/* `seckill bench ...` (argv[0] is "bench"). 0 = run done and audit clean, 1 = audit found a
 * violation, 2 = could not run. */
int bench_main(int argc, char **argv);

/* ==== options ==== */

enum { LOGIN_API = 0, LOGIN_SEED, LOGIN_FILE };

typedef struct bench_opts {
    char target[300];           /* --target http://HOST:PORT [http://127.0.0.1:8081] */
    char target2[300];          /* --also-target URL: half the sale connections go there */
    char host2[256];            /*   parsed */
    int port2;
    char host[256];             /*   parsed */
    int port;
    char data_dir[512];         /* --data-dir: the embedded default's Redis, SQLite, admin token */
    char redis_url[700];        /* --redis URL (user prep, drain, audit) */
    char db_url[700];           /* --db URL (drain, audit) */
    char admin_token[128];      /* --admin-token (voucher creation) */
    int64_t voucher;            /* --voucher ID: use this one; 0 = create one */
    int create_only;            /* --create-only: create the voucher, print its id, stop */
    int64_t stock;              /* --stock N [1000]; with --voucher: its initial stock, -1 unknown */
    int begin_in_s;             /* --begin-in S: the sale opens S seconds after creation [0] */
    int window_s;               /* --window S: sale length [3600] */
    int buckets;                /* --buckets K: the new voucher's stockBuckets [1] */
    int64_t users;              /* --users U [10000] */
    int64_t user_base;          /* --user-base N: phones / seeded ids start here [0] */
    int conns;                  /* --conns C [64] */
    int pipeline;               /* --pipeline P: requests in flight per connection [1] */
    int threads;                /* --threads T [1] */
    double duration_s;          /* --duration S: stop after S seconds; 0 = when every user tried */
    double rate;                /* --rate R: open loop, R requests/s in total; 0 = closed loop */
    int tick_us;                /* --tick-us T: open loop sends what fell due every T us [500] */
    double dup;                 /* --dup F: extra sequential repeat attempts, F per user [0.1] */
    double burst_share;         /* --burst-share F: users whose first try is concurrent [0.05] */
    int burst;                  /* --burst K: copies sent at once in such a try [3] */
    int login;                  /* LOGIN_API (default), --seed-tokens, --tokens FILE */
    char tokens_file[512];
    int token_ttl_s;            /* --token-ttl S: seeded tokens' TTL [7200] */
    char token_key_file[512];   /* --token-key-file F: sign seeded tokens [<data-dir>/token-key] */
    char record[512];           /* --record FILE: success answers, for `audit --orders` */
    char audit_mode[64];        /* --audit-mode NAME: the target's --mode, for the audit */
    char json[512];             /* --json FILE (- = stdout) */
    char html[512];             /* --html FILE: the report as a page with charts */
    char timeline[512];         /* --timeline FILE: per 100 ms, latency, backlog, threads */
    int server_pid;             /* --server-pid PID [found from the listening socket] */
    int redis_pid;              /* --redis-pid PID [INFO server, when local] */
    int audit;                  /* --no-audit turns it off */
    int cpu_probe;              /* --cpu-probe: watch the CPU's slow spells (bench_cpuprobe.h) */
    int drain_timeout_s;        /* --drain-timeout S [60] */
    int timeout_s;              /* --timeout S: wait for answers after the last send [10] */
    uint64_t seed;              /* --seed N: the schedule's random seed [time] */
    int progress;               /* --quiet turns the live line off */
    /* --waiting-room (bench_room.c, bench_room.h) */
    int room;                   /* --waiting-room: join, poll, buy with the pass */
    int room_rate;              /* --room-rate R: the new voucher's admitPerSecond [1000] */
    int room_pass_ttl_s;        /* --room-pass-ttl S: its passTtlS [60] */
    int room_bot_gate;          /* --room-bot-gate: its botGate (the bench solves challenges) */
    double room_early;          /* --room-early F: buyers who join before beginTime [0.5] */
    double room_slow;           /* --room-slow F: buyers of the slow class [0.5] */
    int room_slow_ms;           /* --room-slow-ms MS: the slow class's delay per request [200] */
    int room_late_s;            /* --room-late S: the others join over S s after beginTime [10] */
    /* the lifecycle rehearsal after the sale (bench_life.c, bench_life.h) */
    double pay_share;           /* --pay-share P: orders paid [0] */
    double cancel_share;        /* --cancel-share C: orders cancelled by their buyers [0] */
    int pay_timeout_s;          /* --pay-timeout S: the server's --pay-timeout-s; 0 = no rehearsal */
    char pay_key_file[512];     /* --pay-key-file F [<data-dir>/pay-key] */
    int64_t shop;               /* --shop ID: --voucher's shop, whose list gives its payValue [1] */
    int64_t pay_value;          /* the amount paid: bench's vouchers' 100, or --voucher's payValue */
} bench_opts_t;

/* Fills o from argv (argv[0] = "bench"). Returns 0, 1 for --help, or -1 with a reason in
 * err. Pure: no I/O (the data dir's admin token is read later, by bench_main). */
int bench_parse_args(int argc, char **argv, bench_opts_t *o, char *err, size_t errlen);
void bench_usage(void);

/* ==== the load generator (bench_load.c) ==== */

enum { JOB_SALE = 0, JOB_CODE, JOB_LOGIN };
enum { K_FIRST = 0, K_BURST, K_REPEAT };

typedef struct bench_counters {
    _Atomic uint64_t sent;
    _Atomic uint64_t out[BO__COUNT];
    _Atomic uint64_t by_kind[3];        /* requests sent: first, burst copy, repeat */
    _Atomic uint64_t connects, conn_failures;
    _Atomic uint64_t p99_us;            /* this thread's p99 so far */
    _Atomic uint64_t backlog;           /* open loop: requests due but not yet sent */
} bench_counters_t;

typedef struct bench_success {
    int64_t order_id;
    uint32_t user;                      /* index into the user arrays */
} bench_success_t;

typedef struct bench_load {
    /* in */
    const bench_opts_t *o;
    int job;                            /* JOB_* */
    struct sockaddr_storage addr;
    socklen_t addrlen;
    struct sockaddr_storage addr2;      /* --also-target (addrlen2 0 = none) */
    socklen_t addrlen2;
    char hosthdr[300];                  /* "host:port" */
    int64_t voucher;
    uint32_t user_lo, user_hi;          /* users [lo, hi) take part */
    char (*tokens)[33];                 /* per user: 32 hex + NUL (JOB_LOGIN writes them) */
    char (*codes)[8];                   /* JOB_LOGIN: per user the login code */
    int64_t user_base;
    int threads, conns, pipeline;
    double rate, duration_s, dup, burst_share;
    int burst, timeout_s;
    int tick_us;                        /* open loop: sends grouped per tick (0: 100 us) */
    uint64_t seed;
    int progress_ms;                    /* how often progress() is called [1000] */
    /* out, valid after bench_load_run */
    bench_counters_t *ctr;              /* per thread */
    struct bench_hist **hist;           /* per thread, latency in microseconds */
    struct bench_hist **hist_send;      /* open loop: per thread, from the actual send */
    bench_success_t *succ;              /* JOB_SALE: every success answer */
    size_t nsucc;
    uint32_t *soldout;                  /* JOB_SALE: the user of every sold-out answer */
    size_t nsoldout;
    uint32_t *maybe;                    /* JOB_SALE: the user of every 503 answer (the order
                                           may have been taken: docs/api.md) */
    size_t nmaybe;
    uint64_t t_first_ns, t_last_ns;     /* first send, last answer */
    uint64_t origin_ns;                 /* the timeline's 0 (clock_mono_ns); open loop's
                                           first request is due 100 ms later */
    struct bench_rec *recs;             /* JOB_SALE: every answer (bench_timeline.h) */
    size_t nrecs;
    int recs_truncated;                 /* the log filled up: later answers not in it */
    uint64_t unanswered;                /* requests whose answer never came */
    int failed_users;                   /* JOB_CODE / JOB_LOGIN: users without success */
    /* private */
    struct bench_thread *th;
    _Atomic int running;                /* threads still in their loop */
} bench_load_t;

/* Runs the load with L->threads threads and returns when all are done (0), or -1 with a
 * reason in err if it could not start. progress (may be NULL) is called about once a
 * second from the calling thread while the load runs. */
int bench_load_run(bench_load_t *L, void (*progress)(bench_load_t *L, double elapsed_s, void *arg),
                   void *arg, char *err, size_t errlen);
void bench_load_free(bench_load_t *L);

/* The phone number of user index i (a valid phone for the course's rule). */
void bench_load_phone(int64_t i, char out[16]);

/* ==== user preparation (bench_users.c) ==== */

typedef struct bench_users {
    size_t n;
    char (*tokens)[33];
    int64_t *user_ids;                  /* 0 where not known (API login) */
} bench_users_t;

/* Prepares o->users users by o->login. Returns 0, or -1 with a reason in err. */
int bench_users_prepare(const bench_opts_t *o, const bench_load_t *proto, bench_users_t *u,
                        char *err, size_t errlen);
void bench_users_free(bench_users_t *u);

/* ==== an answer collected by http-parser (bench.c) ==== */

struct http_parser;

/* An answer's status and the first 4 KiB of its body; p->data points at it. The two
 * callbacks go into http_parser_settings' on_body and on_message_complete. With keep_all
 * (bench_http_simple_all), the whole body also goes into all (malloc'd, NUL-ended, the
 * caller frees it): a list longer than 4 KiB. */
typedef struct bench_resp {
    int status;
    char body[4096];
    size_t blen;
    int done;
    int keep_all;
    char *all;
    size_t alen, acap;
} bench_resp_t;
int bench_resp_on_body(struct http_parser *p, const char *at, size_t n);
int bench_resp_on_complete(struct http_parser *p);

/* One blocking HTTP request req (len bytes, Connection: close) to L's target, for set-up
 * and follow-up calls (10 s deadline). 0 with r filled, or -1 with err. */
int bench_http_simple(const bench_load_t *L, const char *req, size_t len, bench_resp_t *r,
                      char *err, size_t errlen);
/* The same, the whole body kept in r->all (free it, also after -1). */
int bench_http_simple_all(const bench_load_t *L, const char *req, size_t len, bench_resp_t *r,
                          char *err, size_t errlen);

/* ==== the waiting room's run (bench_room.c) ==== */

/* Runs --waiting-room for voucher vid (sale opening at begin_s, unix seconds; 0 = open),
 * prints the report, writes --json, drains and audits. 0 clean, 1 the audit found a
 * violation, 2 could not run. */
int bench_room_run(const bench_opts_t *o, const bench_load_t *P, const bench_users_t *u,
                   int64_t vid, int64_t stock, int64_t begin_s, int created);

/* ==== the lifecycle rehearsal (bench_life.c) ==== */

/* `seckill bench --pay-share P --cancel-share C --pay-timeout S`: the order
 * lifecycle rehearsed after the sale (docs/bench.md, "The lifecycle rehearsal").
 *
 * Every order the sale admitted is given one fate, drawn from its order id: a share P is
 * paid (POST /pay/notify, signed with the pay key: --pay-key-file, or <data-dir>/pay-key),
 * a share C is cancelled by its buyer (POST /voucher-order/{id}/cancel with the buyer's
 * token), and the rest are left unpaid until the server's payment timeout cancels them.
 * Then bench waits for Redis to have timed them out (life.lua's counters, summed over the
 * voucher's stock buckets; sync mode, whose sale is in SQL alone: SQL's statuses) and checks the server's timeout against S by when that
 * happened; the audit that follows checks SQL against Redis (its lifecycle checks). */
typedef struct bench_life {
    int64_t to_pay, to_cancel, to_expire;   /* the fates drawn */
    int64_t paid, cancelled;                /* the server's answers: taken / cancelled */
    int64_t refused;                        /* pays or cancels refused (e.g. too late) */
    int64_t r_paid, r_timedout, r_returned; /* Redis's counters once settled */
    double expired_after_s;                 /* from the sale's first admission until Redis
                                               had every unpaid order timed out; -1 never */
    int timeout_ok;                         /* the timeouts came when S says */
    int ok;                                 /* Redis agrees with every fate */
    int in_sql;                             /* sync mode: the r_ figures are SQL's */
    /* paid, cancelled, expired over time: counts at each 100 ms of the rehearsal */
    double *t;
    int64_t (*n)[3];
    size_t ns, cap;
} bench_life_t;

/* Runs the rehearsal for voucher vid after the load L (its success answers, the users'
 * tokens u); first_ms is the wall-clock ms of the sale's first request. Writes its lines
 * to f. 0 when it ran (r->ok says whether Redis agrees), -1 with err when it could not. */
int bench_life_run(const bench_opts_t *o, const bench_load_t *L, const bench_users_t *u,
                   int64_t vid, int64_t first_ms, bench_life_t *r, FILE *f, char *err,
                   size_t errlen);
void bench_life_json(FILE *f, const bench_life_t *r);
/* --voucher's payValue from GET /voucher/list/{o->shop} into *pv: 0, or -1 with err (not
 * in that shop's list, or no answer). */
int bench_life_pay_value(const bench_opts_t *o, const bench_load_t *L, int64_t vid, int64_t *pv,
                         char *err, size_t errlen);
void bench_life_free(bench_life_t *r);

/* ==== the HTML report (bench_html.c) ==== */

/* Cumulative answers by outcome at t seconds into the sale (sampled while it runs). */
typedef struct bench_sample {
    double t;
    uint64_t out[BO__COUNT];
} bench_sample_t;

typedef struct bench_series {
    bench_sample_t *s;
    size_t n, cap;
} bench_series_t;

void bench_html_series_add(bench_series_t *sr, double t, const uint64_t out[BO__COUNT]);
void bench_html_series_free(bench_series_t *sr);

struct bench_hist;

/* What the page shows; texts are the text report and the audit's output as printed. */
typedef struct bench_html {
    const char *target;
    int64_t voucher, stock;               /* stock -1: unknown */
    const bench_series_t *series;         /* the samples taken every 100 ms while it ran */
    const struct bench_rec *recs;         /* every answer (bench_timeline.h), or NULL ... */
    size_t nrecs;                         /* ... when the log filled up: then the samples */
    const struct bench_hist *lat;         /* latency in microseconds, all answers */
    const char *report_text, *audit_text;
    int audit_status;                     /* 0 clean, 1 violation, 2 could not run, -1 skipped */
    const bench_life_t *life;             /* the lifecycle rehearsal, or NULL */
} bench_html_t;

/* Writes the page to path. Returns 0, or -1 with a reason in err. */
int bench_html_write(const char *path, const bench_html_t *h, char *err, size_t errlen);
/* The page's verdict line for an audit status (0 clean, 1 violation, 2 not run, -1 none):
 * the bench's page and the waiting room's say it alike. */
void bench_html_verdict(FILE *f, int audit_status);

#endif

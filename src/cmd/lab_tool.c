/* lab_tool.c -- `seckill lab` (lab_tool.h): runs the course's steps, audits each, prints
 * one table (and --json, --html).
 *
 * Everything it starts is a child process it owns and stops: the step's `seckill serve`
 * instances, `seckill bench` and `seckill audit` (this same binary), and a private
 * redis-server (redis_child.h) unless --redis is given. One database for the whole run (a
 * SQLite file in its directory unless --db is given);
 * every step sells its own voucher to its own users (--user-base), so steps cannot see
 * each other's orders. */
#include "cmd/lab_tool.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <netinet/in.h>
#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <hiredis/hiredis.h>
#include <jansson.h>
#include <mysql.h>
#include <sqlite3.h>

#include "core/clock.h"
#include "redis/rconn.h"
#include "redis/redis_child.h"
#include "cmd/cmd_args.h"
#include "cmd/html_report.h"
#include "core/url.h"
#include "lab/lab.h"
#include "core/xmem.h"

/* ==== the steps ==== */

enum { F_NONE, F_PAUSE, F_KILL_DB_LOCKED, F_KILL_POPPED, F_NO_SUBSCRIBER };

/* The lease of a step's SET NX lock. LEASE_SHORT (--lease-ms) runs out inside the
 * check-write pause, in the middle of the order: the course's 误删情况1, which must show.
 * LEASE_PAST_ORDER is for the get-del pause, which must begin after the order is saved and
 * outlast the lease: the lease is LONG_LEASE_MS and the pause that plus --pause-ms. A lease
 * as short as --lease-ms there would also have to outlast the order itself, which it does
 * not on a busy host (an ASan build's order, two SQLite commits among 32 pool threads,
 * took over 100 ms at load 15: duplicates in 14 of 30 runs); then the user's next click
 * got in mid-order and the row showed the check-write row's duplicates, which this row is
 * there to rule out. */
enum { LEASE_NONE, LEASE_SHORT, LEASE_PAST_ORDER };
#define LONG_LEASE_MS 2000

typedef struct step {
    const char *mode;
    int instances;
    const char *point;          /* --lab-pause point, or NULL */
    int lease;                  /* LEASE_*: the setnx-like locks' --lab-lease-ms */
    int fault;
    const char *claim;          /* what the course says (docs/lab.md has the long form) */
} step_t;

static const step_t steps[] = {
    {"naive", 1, "check-write", 0, F_PAUSE,
     "check stock, then take it: concurrent buyers all pass the check and oversell"},
    {"cas-stock-eq", 1, "check-write", 0, F_PAUSE,
     "optimistic lock, stock = old: no oversell, but most buyers fail while stock remains"},
    {"cas-stock-gt0", 1, "check-write", 0, F_PAUSE,
     "optimistic lock, stock > 0: sells exactly the stock (one per user is the next lesson)"},
    {"local-lock", 1, "check-write", 0, F_PAUSE,
     "synchronized on the user id: one order per user on one instance"},
    {"local-lock", 2, "check-write", 0, F_PAUSE,
     "...but not on two: each JVM has its own lock monitor"},
    {"setnx", 1, "check-write", LEASE_SHORT, F_PAUSE,
     "SET NX EX + DEL: a lease that ends mid-order lets the user's next click in"},
    {"setnx-owner", 1, "check-write", LEASE_SHORT, F_PAUSE,
     "owner check before DEL: no deleting others' locks, but the lease still ends mid-order"},
    {"lua-unlock", 1, "get-del", LEASE_PAST_ORDER, F_PAUSE,
     "compare-and-DEL in one script: a pause between GET and DEL breaks nothing"},
    {"lua-unlock", 1, "check-write", LEASE_SHORT, F_PAUSE,
     "...yet a lease that ends mid-order still lets a second order in (why Redisson)"},
    {"reentrant", 2, "check-write", 0, F_PAUSE,
     "Redisson RLock, watchdog lease: one order per user even on two instances"},
    {"sync", 2, NULL, 0, F_NONE,
     "SQL transaction under rlock: exact, and every request waits for the database"},
    {"queue", 1, NULL, 0, F_KILL_DB_LOCKED,
     "Lua admission + in-process BlockingQueue: fast, kill -9 loses what it holds"},
    {"stream", 1, NULL, 0, F_KILL_DB_LOCKED,
     "Lua admission + Stream consumer group with ack: kill -9 loses nothing"},
    {"list", 1, "pop-write", 0, F_KILL_POPPED,
     "List LPUSH/BRPOP, no ack: the order a consumer popped dies with it"},
    {"pubsub", 1, "subscribe", 0, F_NO_SUBSCRIBER,
     "PubSub: a message published while nobody subscribes is gone"},
};
#define NSTEPS ((int)(sizeof steps / sizeof steps[0]))

typedef struct row {
    const step_t *s;
    char fault[128];
    int ran;
    long long stock, sold, oversold, dups, lost, refused, buyers, requests;
    double rps, p99_ms;
    char error[256];
} row_t;

typedef struct lab {
    /* options */
    char dir[PATH_MAX];
    char redis_given[600];
    char db_given[PATH_MAX + 32];
    char redis_bin[256];
    int64_t stock, users;
    double rate, dup;
    int pause_ms, lease_ms;
    char json[PATH_MAX], html[PATH_MAX];
    char only[512];
    /* run */
    char self[PATH_MAX];
    char redis_url[700];
    char db_path[PATH_MAX + 16], db_url[PATH_MAX + 32];
    char token[40];
    redis_child_t *child;
    int made_dir;
} lab_t;

/* ==== small process helpers ==== */

static void sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

static int free_port(void)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -1;
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof a;
    int port = -1;
    if (bind(fd, (struct sockaddr *)&a, sizeof a) == 0 &&
        getsockname(fd, (struct sockaddr *)&a, &len) == 0)
        port = ntohs(a.sin_port);
    close(fd);
    return port;
}

/* The environment of a `seckill serve` the lab starts: ours, with its Redis and database
 * URLs (which may hold passwords) and the admin token as SECKILL_* variables
 * (docs/configuration.md) instead of flags -- a process's argv is readable by every user
 * (/proc/PID/cmdline), its environment only by its own. Free with free_env. */
static char **serve_env(const lab_t *L)
{
    static const char *const mine[] = {"SECKILL_REDIS=", "SECKILL_DB=", "SECKILL_ADMIN_TOKEN="};
    const char *vals[] = {L->redis_url, L->db_url, L->token};
    size_t n = 0;
    while (environ[n])
        n++;
    char **env = xcalloc(n + 4, sizeof *env);
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        int replaced = 0;
        for (size_t j = 0; j < 3; j++)
            replaced |= strncmp(environ[i], mine[j], strlen(mine[j])) == 0;
        if (!replaced)
            env[k++] = xstrdup(environ[i]);
    }
    for (size_t j = 0; j < 3; j++) {
        size_t len = strlen(mine[j]) + strlen(vals[j]) + 1;
        env[k] = xmalloc(len);
        snprintf(env[k++], len, "%s%s", mine[j], vals[j]);
    }
    return env;
}

static void free_env(char **env)
{
    for (size_t i = 0; env[i]; i++) {
        explicit_bzero(env[i], strlen(env[i]));
        free(env[i]);
    }
    free(env);
}

/* Starts this binary with argv (argv[0] is the subcommand) and env (NULL: ours), stdout to
 * out_path (NULL: the log too), stderr appended to log_path. Returns the pid or -1. */
static pid_t spawn_env(const lab_t *L, char **argv, char **env, const char *log_path,
                       const char *out_path)
{
    pid_t pid = fork();
    if (pid != 0)
        return pid;
    int lf = open(log_path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    int of = out_path ? open(out_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644) : lf;
    int nul = open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (lf < 0 || of < 0 || nul < 0)
        _exit(127);
    dup2(nul, 0);
    dup2(of, 1);
    dup2(lf, 2);
    char *full[64];
    int n = 0;
    full[n++] = (char *)"seckill";
    for (int i = 0; argv[i] && n < 63; i++)
        full[n++] = argv[i];
    full[n] = NULL;
    execve(L->self, full, env ? env : environ);
    _exit(127);
}

static pid_t spawn(const lab_t *L, char **argv, const char *log_path, const char *out_path)
{
    return spawn_env(L, argv, NULL, log_path, out_path);
}

/* Waits for pid up to timeout_s; kills it after that. Returns its exit status, or -1. */
static int wait_exit(pid_t pid, int timeout_s)
{
    uint64_t until = clock_mono_ms() + (uint64_t)timeout_s * 1000;
    for (;;) {
        int st;
        pid_t r = waitpid(pid, &st, WNOHANG);
        if (r == pid)
            return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
        if (r < 0 && errno != EINTR)
            return -1;
        if (clock_mono_ms() > until) {
            kill(pid, SIGKILL);
            waitpid(pid, &st, 0);
            return -1;
        }
        sleep_ms(20);
    }
}

static int run_tool(const lab_t *L, char **argv, const char *log_path, const char *out_path,
                    int timeout_s)
{
    pid_t pid = spawn(L, argv, log_path, out_path);
    return pid < 0 ? -1 : wait_exit(pid, timeout_s);
}

/* GET /health answered 200? */
static int healthy(int port)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return 0;
    struct timeval tv = {2, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port),
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    int ok = 0;
    if (connect(fd, (struct sockaddr *)&a, sizeof a) == 0) {
        static const char req[] = "GET /health HTTP/1.1\r\nHost: lab\r\nConnection: close\r\n\r\n";
        char buf[64] = "";
        if (send(fd, req, sizeof req - 1, MSG_NOSIGNAL) == (ssize_t)(sizeof req - 1) &&
            recv(fd, buf, sizeof buf - 1, 0) > 12)
            ok = strncmp(buf, "HTTP/1.1 200", 12) == 0;
    }
    close(fd);
    return ok;
}

/* ==== one instance ==== */

typedef struct inst {
    pid_t pid;
    int port;
    char name[64];
} inst_t;

/* The step's --lab-pause delay and --lab-lease-ms (LEASE_*). */
static int step_lease_ms(const lab_t *L, const step_t *s)
{
    return s->lease == LEASE_PAST_ORDER ? LONG_LEASE_MS : L->lease_ms;
}

static int step_pause_ms(const lab_t *L, const step_t *s)
{
    if (s->fault == F_NO_SUBSCRIBER)
        return L->pause_ms * 3;
    return s->lease == LEASE_PAST_ORDER ? LONG_LEASE_MS + L->pause_ms : L->pause_ms;
}

static int inst_start(const lab_t *L, const step_t *s, inst_t *in, int with_pause,
                      const char *log_path, char *err, size_t errlen)
{
    char listen[48], pause[64], lease[24];
    snprintf(listen, sizeof listen, "127.0.0.1:%d", in->port);
    char *argv[40];
    int n = 0;
    argv[n++] = "serve";
    argv[n++] = "--listen";
    argv[n++] = listen;
    argv[n++] = "--threads";
    argv[n++] = "1";
    argv[n++] = "--data-dir";
    argv[n++] = (char *)L->dir;
    argv[n++] = "--name";
    argv[n++] = in->name;
    argv[n++] = "--mode";
    argv[n++] = (char *)s->mode;
    argv[n++] = "--log-level";
    argv[n++] = "warn";
    if (with_pause && s->point) {
        snprintf(pause, sizeof pause, "%s:%d", s->point, step_pause_ms(L, s));
        argv[n++] = "--lab-pause";
        argv[n++] = pause;
    }
    if (s->lease != LEASE_NONE) {
        snprintf(lease, sizeof lease, "%d", step_lease_ms(L, s));
        argv[n++] = "--lab-lease-ms";
        argv[n++] = lease;
    }
    argv[n] = NULL;
    char **env = serve_env(L);   /* the Redis and database URLs, the admin token */
    in->pid = spawn_env(L, argv, env, log_path, NULL);
    free_env(env);
    if (in->pid < 0) {
        snprintf(err, errlen, "fork: %s", strerror(errno));
        return -1;
    }
    uint64_t until = clock_mono_ms() + 60000;
    while (!healthy(in->port)) {
        int st;
        if (waitpid(in->pid, &st, WNOHANG) == in->pid) {
            in->pid = -1;
            snprintf(err, errlen, "seckill serve --mode %s exited at start (see %s)", s->mode,
                     log_path);
            return -1;
        }
        if (clock_mono_ms() > until) {
            snprintf(err, errlen, "seckill serve --mode %s not ready after 60 s", s->mode);
            return -1;
        }
        sleep_ms(50);
    }
    return 0;
}

static void inst_stop(inst_t *in, int sig)
{
    if (in->pid <= 0)
        return;
    kill(in->pid, sig);
    int st = wait_exit(in->pid, 45);
    if (st != 0 && sig != SIGKILL)
        fprintf(stderr, "seckill lab: instance %s did not stop cleanly (exit status %d; its "
                        "log is in the lab's directory)\n", in->name, st);
    in->pid = -1;
}

/* ==== faults ==== */

/* What keeps the order writer from writing while it is held: SQLite's write lock, or on
 * MariaDB the step's voucher row locked FOR UPDATE (the writer locks that row first, in
 * every batch: store_orders_write), in a transaction left open. Plain reads go on. */
typedef struct db_hold {
    sqlite3 *lite;
    MYSQL *my;
} db_hold_t;

static int db_is_sqlite(const char *url)
{
    return strncasecmp(url, "sqlite:", 7) == 0;
}

static int db_lock(const lab_t *L, long long voucher_id, db_hold_t *h, char *err, size_t errlen)
{
    memset(h, 0, sizeof *h);
    if (db_is_sqlite(L->db_url)) {
        if (sqlite3_open(L->db_path, &h->lite) != SQLITE_OK) {
            snprintf(err, errlen, "could not open %.150s", L->db_path);
            sqlite3_close(h->lite);
            h->lite = NULL;
            return -1;
        }
        sqlite3_busy_timeout(h->lite, 10000);
        if (sqlite3_exec(h->lite, "BEGIN IMMEDIATE", NULL, NULL, NULL) != SQLITE_OK) {
            snprintf(err, errlen, "could not lock %.150s", L->db_path);
            sqlite3_close(h->lite);
            h->lite = NULL;
            return -1;
        }
        return 0;
    }
    url_mysql_t u;
    char uerr[256];
    if (url_parse_mysql(L->db_url, &u, uerr, sizeof uerr) < 0) {
        snprintf(err, errlen, "--db: %.200s", uerr);
        return -1;
    }
    unsigned connect_s = 10, rw_s = 30;
    h->my = mysql_init(NULL);
    if (!h->my) {
        snprintf(err, errlen, "mysql_init failed");
        return -1;
    }
    mysql_options(h->my, MYSQL_OPT_CONNECT_TIMEOUT, &connect_s);
    mysql_options(h->my, MYSQL_OPT_READ_TIMEOUT, &rw_s);
    mysql_options(h->my, MYSQL_OPT_WRITE_TIMEOUT, &rw_s);
    char sql[160];
    snprintf(sql, sizeof sql, "SELECT stock FROM tb_seckill_voucher WHERE voucher_id = %lld "
             "FOR UPDATE", voucher_id);
    if (!mysql_real_connect(h->my, u.socket[0] ? NULL : u.host, u.user, u.pass, u.dbname,
                            u.port, u.socket[0] ? u.socket : NULL, 0) ||
        mysql_query(h->my, "START TRANSACTION") != 0 || mysql_query(h->my, sql) != 0) {
        snprintf(err, errlen, "could not lock voucher %lld's row: %.150s", voucher_id,
                 mysql_error(h->my));
        mysql_close(h->my);
        h->my = NULL;
        return -1;
    }
    mysql_free_result(mysql_store_result(h->my));
    return 0;
}

static void db_unlock(db_hold_t *h)
{
    if (h->lite) {
        sqlite3_exec(h->lite, "ROLLBACK", NULL, NULL, NULL);
        sqlite3_close(h->lite);
    }
    if (h->my) {
        mysql_query(h->my, "ROLLBACK");
        mysql_close(h->my);
    }
    memset(h, 0, sizeof *h);
}

/* Waits until the lab's order list is empty (the restarted consumer took everything). */
static void wait_list_empty(const lab_t *L, int timeout_ms)
{
    char err[256];
    redisContext *c = rconn_open_url(L->redis_url, 2000, err, sizeof err);
    if (!c)
        return;
    uint64_t until = clock_mono_ms() + (uint64_t)timeout_ms;
    while (clock_mono_ms() < until) {
        redisReply *r = rconn_cmdf(c, err, sizeof err, "LLEN %s", KEY_LAB_LIST);
        int64_t n = -1;
        if (r) {
            rconn_int(r, &n);
            freeReplyObject(r);
        }
        if (n == 0)
            break;
        sleep_ms(50);
    }
    rconn_close(c);
}

/* ==== one step ==== */

static long long jint(json_t *o, const char *path1, const char *path2)
{
    json_t *v = json_object_get(o, path1);
    if (v && path2)
        v = json_object_get(v, path2);
    return json_is_integer(v) ? (long long)json_integer_value(v) : -1;
}

static double jnum(json_t *o, const char *path1, const char *path2)
{
    json_t *v = json_object_get(o, path1);
    if (v && path2)
        v = json_object_get(v, path2);
    return json_is_number(v) ? json_number_value(v) : -1;
}

static void describe_fault(const lab_t *L, const step_t *s, row_t *r)
{
    switch (s->fault) {
    case F_PAUSE:
        if (s->lease != LEASE_NONE)
            snprintf(r->fault, sizeof r->fault, "pause %s %d ms, lease %d ms", s->point,
                     step_pause_ms(L, s), step_lease_ms(L, s));
        else
            snprintf(r->fault, sizeof r->fault, "pause %s %d ms", s->point, L->pause_ms);
        break;
    case F_KILL_DB_LOCKED:
        snprintf(r->fault, sizeof r->fault, "kill -9 while SQL is locked");
        break;
    case F_KILL_POPPED:
        snprintf(r->fault, sizeof r->fault, "kill -9 of a consumer after BRPOP");
        break;
    case F_NO_SUBSCRIBER:
        snprintf(r->fault, sizeof r->fault, "no subscriber for the first %d ms", L->pause_ms * 3);
        break;
    default:
        snprintf(r->fault, sizeof r->fault, "-");
    }
}

static int run_step(lab_t *L, int idx, row_t *r)
{
    const step_t *s = r->s;
    char log_path[PATH_MAX + 64], rec[PATH_MAX + 64], bj[PATH_MAX + 64], aj[PATH_MAX + 64],
        vout[PATH_MAX + 64];
    snprintf(log_path, sizeof log_path, "%s/step%02d-%s.log", L->dir, idx + 1, s->mode);
    snprintf(rec, sizeof rec, "%s/step%02d.record", L->dir, idx + 1);
    snprintf(bj, sizeof bj, "%s/step%02d.bench.json", L->dir, idx + 1);
    snprintf(aj, sizeof aj, "%s/step%02d.audit.json", L->dir, idx + 1);
    snprintf(vout, sizeof vout, "%s/step%02d.voucher", L->dir, idx + 1);
    /* The instances' signing key (their data dir's, made by the first one): the bench's
     * seeded buyers get tokens they verify, since a signed-format server takes no other. */
    char keyf[PATH_MAX + 16];
    snprintf(keyf, sizeof keyf, "%s/token-key", L->dir);
    inst_t in[2];
    memset(in, 0, sizeof in);
    int rc = -1;
    db_hold_t lock = {0};
    for (int i = 0; i < s->instances; i++) {
        in[i].pid = -1;
        in[i].port = free_port();
        snprintf(in[i].name, sizeof in[i].name, "lab%02d-%d", idx + 1, i);
        if (inst_start(L, s, &in[i], 1, log_path, r->error, sizeof r->error) < 0)
            goto out;
    }
    char target[2][64], users[24], stock[24], rate[24], dup[24], base[24], voucher[24];
    for (int i = 0; i < s->instances; i++)
        snprintf(target[i], sizeof target[i], "http://127.0.0.1:%d", in[i].port);
    snprintf(users, sizeof users, "%lld", (long long)L->users);
    snprintf(stock, sizeof stock, "%lld", (long long)L->stock);
    snprintf(rate, sizeof rate, "%g", L->rate);
    snprintf(dup, sizeof dup, "%g", L->dup);
    snprintf(base, sizeof base, "%lld", (long long)(idx + 1) * 1000000LL);

    /* The voucher first, so a fault on SQL cannot stop its creation. */
    char *mk[] = {"bench", "--target", target[0], "--admin-token", L->token, "--stock", stock,
                  "--redis", L->redis_url, "--seed-tokens", "--create-only", "--quiet", NULL};
    if (run_tool(L, mk, log_path, vout, 60) != 0) {
        snprintf(r->error, sizeof r->error, "could not create the voucher (see %.150s)", log_path);
        goto out;
    }
    FILE *vf = fopen(vout, "r");
    long long vid = 0;
    if (!vf || fscanf(vf, "%lld", &vid) != 1 || vid <= 0) {
        if (vf)
            fclose(vf);
        snprintf(r->error, sizeof r->error, "no voucher id from bench --create-only");
        goto out;
    }
    fclose(vf);
    snprintf(voucher, sizeof voucher, "%lld", vid);
    if (s->fault == F_KILL_DB_LOCKED && db_lock(L, vid, &lock, r->error, sizeof r->error) < 0)
        goto out;

    /* The same load for every step: open loop, repeat clicks, double clicks. */
    char *bv[48];
    int n = 0;
    bv[n++] = "bench";
    bv[n++] = "--target";
    bv[n++] = target[0];
    if (s->instances > 1) {
        bv[n++] = "--also-target";
        bv[n++] = target[1];
    }
    char *rest[] = {"--redis", L->redis_url, "--db", L->db_url, "--voucher", voucher,
                    "--stock", stock, "--seed-tokens", "--token-key-file", keyf,
                    "--user-base", base, "--users", users,
                    "--rate", rate, "--dup", dup, "--burst-share", "0.5", "--burst", "2",
                    "--conns", "32", "--record", rec, "--json", bj, "--no-audit", "--quiet",
                    "--seed", "1", NULL};
    for (int i = 0; rest[i]; i++)
        bv[n++] = rest[i];
    bv[n] = NULL;
    if (run_tool(L, bv, log_path, NULL, 300) != 0) {
        snprintf(r->error, sizeof r->error, "bench failed (see %.150s)", log_path);
        goto out;
    }

    /* The fault's second half, then everything written that can be. */
    if (s->fault == F_KILL_DB_LOCKED || s->fault == F_KILL_POPPED) {
        inst_stop(&in[0], SIGKILL);
        db_unlock(&lock);
        if (inst_start(L, s, &in[0], 0, log_path, r->error, sizeof r->error) < 0)
            goto out;
        if (s->fault == F_KILL_POPPED)
            wait_list_empty(L, 30000);
    }
    char *av[] = {"audit", "--redis", L->redis_url, "--db", L->db_url, "--orders", rec,
                  "--json", aj, "--wait-drain", "30", "--mode", (char *)s->mode, NULL};
    if (!strcmp(s->mode, "stream") && run_tool(L, av, log_path, "/dev/null", 120) == 2) {
        snprintf(r->error, sizeof r->error, "audit could not run (see %.150s)", log_path);
        goto out;
    }
    for (int i = 0; i < s->instances; i++)
        inst_stop(&in[i], SIGTERM);
    if (run_tool(L, av, log_path, "/dev/null", 120) == 2) {   /* 1 = violations: expected */
        snprintf(r->error, sizeof r->error, "audit could not run (see %.150s)", log_path);
        goto out;
    }

    json_error_t je;
    json_t *b = json_load_file(bj, 0, &je), *a = json_load_file(aj, 0, &je);
    json_t *v = a ? json_array_get(json_object_get(a, "vouchers"), 0) : NULL;
    if (!b || !v) {
        snprintf(r->error, sizeof r->error, "unreadable bench or audit JSON in %.150s", L->dir);
        json_decref(a);
        json_decref(b);
        goto out;
    }
    r->rps = jnum(b, "rps", NULL);
    double p99 = jnum(b, "latency_us", "p99");
    r->p99_ms = p99 >= 0 ? p99 / 1000.0 : -1;
    r->requests = jint(b, "requests", NULL);
    r->stock = L->stock;
    r->sold = jint(v, "sql", "orders");
    r->oversold = jint(v, "lab", "oversold");
    r->dups = jint(v, "lab", "duplicate_buyers");
    r->lost = jint(v, "lab", "lost");
    r->refused = jint(v, "lab", "refused_in_stock");
    r->buyers = jint(v, "lab", "buyers");
    r->ran = 1;
    json_decref(a);
    json_decref(b);
    rc = 0;
out:
    db_unlock(&lock);
    for (int i = 0; i < s->instances; i++)
        inst_stop(&in[i], SIGTERM);
    return rc;
}

/* ==== output ==== */

static const char *const head[] = {"step", "instances", "fault", "sold/stock", "oversold",
                                   "duplicate buyers", "lost admitted orders",
                                   "refused while stock remained", "req/s", "p99 ms"};
#define NCOLS 10

static void cells_of(const row_t *r, char c[NCOLS][128])
{
    snprintf(c[0], 128, "%s", r->s->mode);
    snprintf(c[1], 128, "%d", r->s->instances);
    snprintf(c[2], 128, "%s", r->fault);
    if (!r->ran) {
        for (int i = 3; i < NCOLS; i++)
            snprintf(c[i], 128, "%s", i == 3 ? "failed" : "-");
        return;
    }
    snprintf(c[3], 128, "%lld/%lld", r->sold, r->stock);
    snprintf(c[4], 128, "%lld", r->oversold);
    snprintf(c[5], 128, "%lld", r->dups);
    snprintf(c[6], 128, "%lld", r->lost);
    snprintf(c[7], 128, "%lld", r->refused);
    snprintf(c[8], 128, "%.0f", r->rps);
    snprintf(c[9], 128, "%.1f", r->p99_ms);
}

static void print_table(FILE *f, const row_t *rows, int n)
{
    static const int w[NCOLS] = {13, 3, 38, 7, 8, 10, 10, 10, 6, 7};
    static const char *const short_head[NCOLS] = {"step", "n", "fault", "sold", "oversold",
                                                  "dup buyers", "lost", "refused*", "req/s",
                                                  "p99 ms"};
    for (int i = 0; i < NCOLS; i++)
        fprintf(f, i < 3 ? "%-*s " : "%*s ", w[i], short_head[i]);
    fputc('\n', f);
    for (int k = 0; k < n; k++) {
        char c[NCOLS][128];
        cells_of(&rows[k], c);
        for (int i = 0; i < NCOLS; i++)
            fprintf(f, i < 3 ? "%-*s " : "%*s ", w[i], c[i]);
        fputc('\n', f);
    }
    fprintf(f, "n = instances; lost = admitted orders not in SQL; refused* = buyers refused "
               "while stock remained\n");
    for (int k = 0; k < n; k++)
        if (rows[k].error[0])
            fprintf(f, "step %d (%s): %s\n", k + 1, rows[k].s->mode, rows[k].error);
}

static void write_json(FILE *f, const lab_t *L, const row_t *rows, int n)
{
    json_t *o = json_object(), *arr = json_array();
    json_object_set_new(o, "stock", json_integer(L->stock));
    json_object_set_new(o, "users", json_integer(L->users));
    json_object_set_new(o, "rate", json_real(L->rate));
    json_object_set_new(o, "dup", json_real(L->dup));
    json_object_set_new(o, "pause_ms", json_integer(L->pause_ms));
    json_object_set_new(o, "lease_ms", json_integer(L->lease_ms));
    for (int k = 0; k < n; k++) {
        const row_t *r = &rows[k];
        json_t *s = json_object();
        json_object_set_new(s, "step", json_string(r->s->mode));
        json_object_set_new(s, "instances", json_integer(r->s->instances));
        json_object_set_new(s, "fault", json_string(r->fault));
        json_object_set_new(s, "claim", json_string(r->s->claim));
        json_object_set_new(s, "ran", json_boolean(r->ran));
        if (r->ran) {
            json_object_set_new(s, "stock", json_integer(r->stock));
            json_object_set_new(s, "sold", json_integer(r->sold));
            json_object_set_new(s, "buyers", json_integer(r->buyers));
            json_object_set_new(s, "oversold", json_integer(r->oversold));
            json_object_set_new(s, "duplicate_buyers", json_integer(r->dups));
            json_object_set_new(s, "lost", json_integer(r->lost));
            json_object_set_new(s, "refused_in_stock", json_integer(r->refused));
            json_object_set_new(s, "requests", json_integer(r->requests));
            json_object_set_new(s, "rps", json_real(r->rps));
            json_object_set_new(s, "p99_ms", json_real(r->p99_ms));
        } else {
            json_object_set_new(s, "error", json_string(r->error));
        }
        json_array_append_new(arr, s);
    }
    json_object_set_new(o, "steps", arr);
    json_dumpf(o, f, JSON_INDENT(1) | JSON_REAL_PRECISION(6));
    fputc('\n', f);
    json_decref(o);
}

static int write_html(const lab_t *L, const row_t *rows, int n, char *err, size_t errlen)
{
    FILE *f = fopen(L->html, "w");
    if (!f) {
        snprintf(err, errlen, "%.500s: %s", L->html, strerror(errno));
        return -1;
    }
    if (html_report_begin(f, "seckill lab: the flash-sale chapter, step by step", err,
                          errlen) < 0) {
        fclose(f);
        unlink(L->html);
        return -1;
    }
    char intro[512];
    snprintf(intro, sizeof intro,
             "Every step sold %lld vouchers to %lld buyers at %g requests/s (each buyer clicks "
             "again %g times on average, half of them double-click), then was audited: the "
             "figures are counted in SQL and Redis, not taken from the answers.",
             (long long)L->stock, (long long)L->users, L->rate, L->dup);
    html_report_text(f, intro);
    char(*cells)[NCOLS][128] = xcalloc((size_t)n, sizeof *cells);
    const char **cp = xcalloc((size_t)n * (NCOLS + 1), sizeof *cp);
    const char **names = xcalloc((size_t)n, sizeof *names);
    char(*label)[64] = xcalloc((size_t)n, sizeof *label);
    double *vals = xcalloc((size_t)n, sizeof *vals);
    for (int k = 0; k < n; k++) {
        cells_of(&rows[k], cells[k]);
        for (int i = 0; i < NCOLS; i++)
            cp[k * (NCOLS + 1) + i] = cells[k][i];
        cp[k * (NCOLS + 1) + NCOLS] = rows[k].s->claim;
        int twice = 0;   /* the same mode and instances under two faults: name the pause */
        for (int j = 0; j < NSTEPS; j++)
            twice += !strcmp(steps[j].mode, rows[k].s->mode) &&
                     steps[j].instances == rows[k].s->instances;
        snprintf(label[k], sizeof label[k], "%s%s%s%s", rows[k].s->mode,
                 rows[k].s->instances > 1 ? " x2" : "", twice > 1 ? " @" : "",
                 twice > 1 && rows[k].s->point ? rows[k].s->point : "");
        names[k] = label[k];
    }
    const char *h[NCOLS + 1];
    for (int i = 0; i < NCOLS; i++)
        h[i] = head[i];
    h[NCOLS] = "the course says";
    html_report_table(f, h, NCOLS + 1, cp, n);
    struct {
        const char *title;
        size_t off;
        int dbl;
    } cols[] = {
        {"oversold", offsetof(row_t, oversold), 0},
        {"duplicate buyers", offsetof(row_t, dups), 0},
        {"lost admitted orders", offsetof(row_t, lost), 0},
        {"refused while stock remained", offsetof(row_t, refused), 0},
        {"req/s", offsetof(row_t, rps), 1},
        {"p99 ms", offsetof(row_t, p99_ms), 1},
    };
    for (size_t c = 0; c < sizeof cols / sizeof cols[0]; c++) {
        for (int k = 0; k < n; k++) {
            const char *p = (const char *)&rows[k] + cols[c].off;
            vals[k] = !rows[k].ran ? 0 : cols[c].dbl ? *(const double *)p
                                                      : (double)*(const long long *)p;
        }
        html_report_bars(f, cols[c].title, cols[c].title, names, vals, n);
    }
    html_report_end(f);
    free(cells);
    free(cp);
    free(names);
    free(label);
    free(vals);
    if (fclose(f) != 0) {
        snprintf(err, errlen, "%.500s: %s", L->html, strerror(errno));
        return -1;
    }
    return 0;
}

/* ==== options and main ==== */

#define F(field) CMD_ARGS_FIELD(lab_t, field)

static const cmd_arg_t lab_arg_rows[] = {
    {"steps", CMD_ARG_STR, F(only), 0, 0, "LIST",
     "comma-separated modes to run [all]: naive, cas-stock-eq,\n"
     "cas-stock-gt0, local-lock, setnx, setnx-owner, lua-unlock,\n"
     "reentrant, sync, queue, stream, list, pubsub"},
    {"stock", CMD_ARG_I64, F(stock), 1, 1e6, "N", "stock of each step's voucher [20]"},
    {"users", CMD_ARG_I64, F(users), 1, 1e6, "N", "buyers per step [60]"},
    {"rate", CMD_ARG_DBL, F(rate), 1, 1e6, "R", "requests/s, open loop [60]"},
    {"dup", CMD_ARG_DBL, F(dup), 0, 10, "F", "repeat clicks per buyer [2]"},
    {"pause-ms", CMD_ARG_INT, F(pause_ms), 1, 60000, "N", "the injected delay (--lab-pause) [300]"},
    {"lease-ms", CMD_ARG_INT, F(lease_ms), 1, 60000, "N",
     "the setnx locks' lease, shorter than the pause [100]\n"
     "(lua-unlock's get-del row: 2000 ms, pause 2000 + N)"},
    {"json", CMD_ARG_STR, F(json), 0, 0, "FILE", "also write the table as JSON (- = stdout)"},
    {"html", CMD_ARG_STR, F(html), 0, 0, "FILE",
     "also write an HTML report with a chart per column"},
    {"dir", CMD_ARG_STR, F(dir), 0, 0, "DIR",
     "working directory (kept) [a temporary one, removed]"},
    {"db", CMD_ARG_STR, F(db_given), 0, 0, "URL",
     "use this database (sqlite:PATH or mysql://...; the lab\n"
     "adds vouchers and orders to it) [a SQLite file in --dir]"},
    {"redis", CMD_ARG_STR, F(redis_given), 0, 0, "URL",
     "use this Redis (a scratch one: the lab writes keys)"},
    {"redis-server-bin", CMD_ARG_STR, F(redis_bin), 0, 0, "B",
     "redis-server to start [redis-server]"},
};
static const cmd_args_t lab_args_spec = {
    lab_arg_rows, sizeof lab_arg_rows / sizeof lab_arg_rows[0], 18};

static void usage(FILE *f)
{
    fprintf(f,
            "usage: seckill lab [options]\n\n"
            "Runs every step of the course's flash-sale chapter under the same load, audits\n"
            "each and prints one table (docs/lab.md). Starts its own redis-server and\n"
            "SQLite file under --dir (or uses --redis, --db), and its own seckill instances.\n\n");
    cmd_args_help(f, &lab_args_spec);
}

static int selected(const lab_t *L, const step_t *s)
{
    if (!L->only[0])
        return 1;
    const char *p = L->only;
    size_t n = strlen(s->mode);
    while (*p) {
        size_t k = strcspn(p, ",");
        if (k == n && !strncmp(p, s->mode, n))
            return 1;
        p += k + (p[k] == ',');
    }
    return 0;
}

static void remove_dir(const char *dir)
{
    pid_t pid = fork();
    if (pid == 0) {
        execlp("rm", "rm", "-rf", "--", dir, (char *)NULL);
        _exit(127);
    }
    if (pid > 0)
        waitpid(pid, NULL, 0);
}

int lab_tool_main(int argc, char **argv)
{
    lab_t L = {.stock = 20, .users = 60, .rate = 60, .dup = 2, .pause_ms = 300, .lease_ms = 100,
               .redis_bin = "redis-server"};
    int exit_now = cmd_args_main(&lab_args_spec, "seckill lab", usage, argc, argv, &L);
    if (exit_now >= 0)
        return exit_now;
    if (L.lease_ms >= L.pause_ms) {
        fprintf(stderr, "seckill lab: --lease-ms must be shorter than --pause-ms: the lesson is a "
                        "lease that runs out mid-order\n");
        return 2;
    }
    char err[1024];
    for (const char *p = L.only; *p;) {   /* every name given must be a step */
        size_t k = strcspn(p, ",");
        int found = 0;
        for (int i = 0; i < NSTEPS; i++)
            found |= strlen(steps[i].mode) == k && !strncmp(p, steps[i].mode, k);
        if (!found) {
            fprintf(stderr, "seckill lab: no step \"%.*s\" (see --help)\n", (int)k, p);
            return 2;
        }
        p += k + (p[k] == ',');
    }
    ssize_t sl = readlink("/proc/self/exe", L.self, sizeof L.self - 1);
    if (sl <= 0) {
        fprintf(stderr, "seckill lab: cannot find its own binary: %s\n", strerror(errno));
        return 2;
    }
    L.self[sl] = '\0';
    if (!L.dir[0]) {
        snprintf(L.dir, sizeof L.dir, "%s/seckill-lab-XXXXXX",
                 getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
        if (!mkdtemp(L.dir)) {
            fprintf(stderr, "seckill lab: mkdtemp: %s\n", strerror(errno));
            return 2;
        }
        L.made_dir = 1;
    } else if (mkdir(L.dir, 0755) < 0 && errno != EEXIST) {
        fprintf(stderr, "seckill lab: %s: %s\n", L.dir, strerror(errno));
        return 2;
    }
    char abs[PATH_MAX];
    if (realpath(L.dir, abs))
        snprintf(L.dir, sizeof L.dir, "%s", abs);
    if (L.db_given[0]) {
        /* A given database: each step adds its own voucher and users, nothing is removed. */
        snprintf(L.db_url, sizeof L.db_url, "%s", L.db_given);
        if (db_is_sqlite(L.db_url)) {
            const char *path = url_sqlite_path(L.db_url);
            if (!path || !*path) {
                fprintf(stderr, "seckill lab: --db %s names no file\n", L.db_url);
                if (L.made_dir)
                    remove_dir(L.dir);
                return 2;
            }
            snprintf(L.db_path, sizeof L.db_path, "%s", path);
        }
    } else {
        snprintf(L.db_path, sizeof L.db_path, "%s/lab.db", L.dir);
        unlink(L.db_path);
        snprintf(L.db_url, sizeof L.db_url, "sqlite:%s", L.db_path);
    }
    unsigned long long r = (unsigned long long)clock_mono_ns() ^ (unsigned long long)getpid();
    snprintf(L.token, sizeof L.token, "lab%016llx", r);
    if (L.redis_given[0]) {
        snprintf(L.redis_url, sizeof L.redis_url, "%s", L.redis_given);
    } else {
        L.child = redis_child_start(L.redis_bin, L.dir, 0, L.redis_url, sizeof L.redis_url, err,
                                    sizeof err);
        if (!L.child) {
            fprintf(stderr, "seckill lab: %s\n", err);
            if (L.made_dir)
                remove_dir(L.dir);
            return 2;
        }
    }
    signal(SIGPIPE, SIG_IGN);

    row_t rows[NSTEPS];
    int n = 0;
    uint64_t t0 = clock_mono_ms();
    for (int i = 0; i < NSTEPS; i++) {
        if (!selected(&L, &steps[i]))
            continue;
        row_t *rw = &rows[n];
        memset(rw, 0, sizeof *rw);
        rw->s = &steps[i];
        describe_fault(&L, &steps[i], rw);
        fprintf(stderr, "seckill lab: step %d: %s on %d instance%s (%s)...\n", n + 1,
                steps[i].mode, steps[i].instances, steps[i].instances > 1 ? "s" : "", rw->fault);
        run_step(&L, n, rw);
        n++;
    }
    fprintf(stderr, "seckill lab: %d steps in %.1f s\n\n", n,
            (double)(clock_mono_ms() - t0) / 1000.0);
    redis_child_stop(L.child);

    int status = 0;
    print_table(stdout, rows, n);
    if (L.json[0]) {
        FILE *f = strcmp(L.json, "-") == 0 ? stdout : fopen(L.json, "w");
        if (!f) {
            fprintf(stderr, "seckill lab: %s: %s\n", L.json, strerror(errno));
            status = 2;
        } else {
            write_json(f, &L, rows, n);
            if (f != stdout)
                fclose(f);
        }
    }
    if (L.html[0] && write_html(&L, rows, n, err, sizeof err) < 0) {
        fprintf(stderr, "seckill lab: %s\n", err);
        status = 2;
    }
    for (int k = 0; k < n; k++)
        if (!rows[k].ran)
            status = 2;
    if (L.made_dir && status == 0)
        remove_dir(L.dir);
    else
        fprintf(stderr, "seckill lab: logs and data in %s\n", L.dir);
    return status;
}

/* server.c -- `seckill serve`: bring the parts up in order, run, and take them down.
 *
 * Threads: main (this file: start-up, then waits for a signal, restarting the embedded
 * default's redis-server if it dies meanwhile), N workers (HTTP + Redis
 * on one event loop each), the order writer, and the job pool's SQL threads. The main
 * thread blocks SIGINT/SIGTERM before starting any thread, so only sigtimedwait() here sees
 * them and shutdown runs in one known place, in a known order:
 *   workers stop accepting and finish in-flight requests -> loops exit -> the writer
 *   commits and acks what it holds -> job pool drains -> embedded redis-server stops. */
#include "server/server.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <event2/event.h>
#include <hiredis/hiredis.h>

#include "sale/admission.h"
#include "api/api.h"
#include "core/app.h"
#include "auth/auth.h"
#include "server/board.h"
#include "http/clientip.h"
#include "http/connlimit.h"
#include "core/datadir.h"
#include "server/fdlimit.h"
#include "http/http.h"
#include "server/jobs.h"
#include "core/key.h"
#include "core/log.h"
#include "server/metrics.h"
#include "sale/order_mode.h"
#include "sale/orderid.h"
#include "sale/ordq.h"
#include "sale/ratelimit.h"
#include "redis/rcl_sync.h"
#include "room/pow.h"
#include "redis/rconn.h"
#include "redis/rds.h"
#include "rebuild/rebuild_watch.h"
#include "room/room.h"
#include "redis/redis_child.h"
#include "auth/revoke.h"
#include "core/rnd.h"
#include "core/secret.h"
#include "order/paykey.h"
#include "store/store.h"
#include "sale/sync_order.h"
#include "auth/token.h"
#include "core/url.h"
#include "server/worker.h"
#include "writer/writer.h"
#include "core/xmem.h"

#define SHUTDOWN_GRACE_MS 5000
#define JOB_THREADS 2
#define JOB_QUEUE_MAX 4096
#define ADMIN_TOKEN_MIN 16      /* characters: shorter ones are refused at start */

/* The embedded default keeps its admin token in <data-dir>/admin-token (mode 0600), so a
 * restart does not invalidate what the operator copied from the first start. The file is
 * read and made through datadir.h: never through a symlink, never overwritten, only
 * trusted when it is ours alone. Returns 0, or -1 with the reason in err. */
static int embedded_admin_token(app_t *app, char *err, size_t errlen)
{
    const char *dir = app->cfg.data_dir;
    char buf[sizeof app->admin_token];
    int rc = datadir_read_secret(dir, "admin-token", buf, sizeof buf, err, errlen);
    if (rc < 0)
        return -1;
    if (rc == 1 && strlen(buf) >= ADMIN_TOKEN_MIN) {
        memcpy(app->admin_token, buf, strlen(buf) + 1);
        return 0;
    }
    if (rc == 1) {
        snprintf(err, errlen, "%s/admin-token holds no token (fewer than %d characters): "
                 "remove it to have a new one made", dir, ADMIN_TOKEN_MIN);
        return -1;
    }
    if (rnd_hex(app->admin_token, 16) != 0) {
        snprintf(err, errlen, "random number generator unavailable");
        return -1;
    }
    return datadir_write_secret(dir, "admin-token", app->admin_token, err, errlen);
}

/* --redis-wait-replicas N with fewer than N replicas connected: every admission would be
 * answered RETRY and nothing written to SQL. Not refused (a replica may be on its way),
 * but said at start. */
static void warn_replicas(const app_t *app, redisContext *c)
{
    int want = app->cfg.redis_wait_replicas;
    if (want <= 0)
        return;
    redisReply *r = redisCommand(c, "INFO replication");
    const char *v = r && r->type == REDIS_REPLY_STRING ? strstr(r->str, "connected_slaves:") : NULL;
    int have = 0;
    if (v && sscanf(v, "connected_slaves:%d", &have) == 1 && have < want)
        log_warn("--redis-wait-replicas %d, but the Redis master has %d replica%s connected: "
                 "until it has %d, every admission is answered RETRY and no order is written "
                 "to SQL", want, have, have == 1 ? "" : "s", want);
    freeReplyObject(r);
}

/* Redis Cluster: the same lease, routed to the node that holds KEY_INSTANCE. Every
 * master must be >= 6.2 too, but they are checked by the cluster itself (a mixed-version
 * cluster is the operator's business); the node answering INFO stands for them. */
static int cluster_prepare(app_t *app, const url_redis_t *a, const char *shown, char *err,
                           size_t errlen)
{
    char why[512];
    rcl_sync_t *s = rcl_sync_open(a, app->cfg.redis_timeout_ms, why, sizeof why);
    if (!s) {
        snprintf(err, errlen, "cannot read the slot map of the Redis Cluster at %s (%s): start "
                 "it (deploy/redis-cluster.sh) or check the seed addresses", shown, why);
        return -1;
    }
    if (rcl_sync_map(s)->nslots != RCL_SLOTS)
        log_warn("redis cluster %s: only %d of %d slots are served now", shown,
                 rcl_sync_map(s)->nslots, RCL_SLOTS);
    const char *incr[2] = { "INCR", KEY_INSTANCE };
    redisReply *r = rcl_sync_command(s, NULL, 0, 2, incr, NULL, why, sizeof why);
    if (!r || r->type != REDIS_REPLY_INTEGER) {
        snprintf(err, errlen, "Redis INCR %s failed: %s", KEY_INSTANCE,
                 r && r->type == REDIS_REPLY_ERROR ? r->str : why);
        freeReplyObject(r);
        rcl_sync_close(s);
        return -1;
    }
    app->instance_slot = (uint32_t)(r->integer % (1 << ORDERID_SLOT_BITS));
    freeReplyObject(r);
    int ms[RCL_MAX_NODES];
    int n = rcluster_map_masters(rcl_sync_map(s), ms);
    for (int i = 0; i < n; i++) {
        redisContext *c = rcl_sync_ctx(s, ms[i], why, sizeof why);
        if (c)
            warn_replicas(app, c);
    }
    rcl_sync_close(s);
    return 0;
}

/* Signed tokens (token.h): the key from --token-key-file, else <data-dir>/token-key,
 * created 0600 on first start. Every instance of a cluster must read the same key; one
 * that does not still accepts the others' tokens, through Redis (slower). */
static int token_key_setup(app_t *app, char *err, size_t errlen)
{
    const config_t *cfg = &app->cfg;
    pow_conf_t pc = {cfg->pow_min_bits, cfg->pow_max_bits, cfg->pow_rate,
                     pow_code_gate_mode(cfg->code_gate)};
    if (strcmp(cfg->token_format, "signed") != 0) {
        log_info("token format opaque: every token is looked up in Redis");
        /* the bot gate's key is then this process's own (pow.h) */
        return pow_init(app, NULL, 0, &pc, err, errlen);
    }
    uint8_t key[TOKEN_KEY_MAX];
    size_t len = 0;
    char path[600];
    int rc;
    if (cfg->token_key_file[0]) {
        snprintf(path, sizeof path, "%s", cfg->token_key_file);
        rc = token_key_read(path, key, &len, err, errlen);
    } else {
        /* through the data dir's descriptor (datadir.h), not its path again */
        snprintf(path, sizeof path, "%s/token-key", cfg->data_dir);
        rc = token_key_read_or_create(datadir_fd(), "token-key", path, key, &len, err, errlen);
    }
    if (rc < 0)
        return -1;
    app->signer = token_signer_new(key, len);
    rc = pow_init(app, key, len, &pc, err, errlen);
    memset(key, 0, sizeof key);
    if (rc < 0)
        return -1;
    if (!app->signer) {
        snprintf(err, errlen, "cannot set up the token key (OpenSSL)");
        return -1;
    }
    log_info("signed tokens: key from %s", path);
    return 0;
}

/* Leases this process's order-id slot (orderid.h) and checks the Redis version: streams
 * with XAUTOCLAIM need Redis >= 6.2. */
static int redis_prepare(app_t *app, char *err, size_t errlen)
{
    url_redis_t a;
    if (url_parse_redis(app->redis_url, &a) == 0 && a.cluster) {
        char shown[600];
        return cluster_prepare(app, &a, url_redact(app->redis_url, shown, sizeof shown), err,
                               errlen);
    }
    char why[900];
    redisContext *c = rconn_open_url(app->redis_url, app->cfg.redis_timeout_ms, why, sizeof why);
    if (!c) {
        snprintf(err, errlen, "%s (start redis-server there, or omit --redis to let seckill run a private one)", why);
        return -1;
    }
    redisReply *r = redisCommand(c, "INCR %s", KEY_INSTANCE);
    if (!r || r->type != REDIS_REPLY_INTEGER) {
        snprintf(err, errlen, "Redis INCR %s failed: %s", KEY_INSTANCE,
                 r && r->type == REDIS_REPLY_ERROR ? r->str : c->errstr);
        freeReplyObject(r);
        redisFree(c);
        return -1;
    }
    app->instance_slot = (uint32_t)(r->integer % (1 << ORDERID_SLOT_BITS));
    freeReplyObject(r);
    r = redisCommand(c, "INFO server");
    if (r && r->type == REDIS_REPLY_STRING) {
        const char *v = strstr(r->str, "redis_version:");
        int major = 0, minor = 0;
        if (v && sscanf(v, "redis_version:%d.%d", &major, &minor) == 2 &&
            (major < 6 || (major == 6 && minor < 2))) {
            snprintf(err, errlen, "Redis %d.%d is too old: seckill needs Redis 6.2 or newer", major, minor);
            freeReplyObject(r);
            redisFree(c);
            return -1;
        }
    }
    freeReplyObject(r);
    warn_replicas(app, c);
    redisFree(c);
    return 0;
}

/* A worker opens its listener once its Redis client is up (http_worker_hold_accept):
 * before that every order would be a 503. */
static void on_worker_redis_up(worker_t *w)
{
    if (rds_is_up(w->rds))
        http_worker_open_accept(w);
}

static void *worker_main(void *arg)
{
    worker_t *w = arg;
    log_set_thread_name(w->name);
    return worker_loop(w);
}

static void on_http_stopped(worker_t *w)
{
    event_base_loopexit(w->base, NULL);
}

static void worker_stop_fn(worker_t *w, void *arg)
{
    (void)arg;
    http_worker_stop(w, SHUTDOWN_GRACE_MS, on_http_stopped);
}

static void free_worker(worker_t *w)
{
    if (!w)
        return;
    /* The loop has exited: nothing runs on it any more, so tearing down from here is
     * safe. Redis first: pending callbacks (if any) still find their connections. */
    board_free(w);
    rds_free(w->rds);
    w->rds = NULL;
    revoke_free(w);
    admission_cache_free(w);
    room_worker_free(w);
    auth_cache_free(w);
    ratelimit_worker_free(w);
    http_worker_free(w);
    free(w->m);
    w->m = NULL;
    worker_free(w);
}

/* What /metrics reads of the http and Redis sides (metrics.h knows neither). */
static int probe_http_conns(const worker_t *w)
{
    return http_worker_conns(w);
}

static int probe_redis_up(const worker_t *w)
{
    return w->rds != NULL && rds_is_up(w->rds);
}

static worker_t *make_worker(app_t *app, int id, const url_redis_t *addr, char *err, size_t errlen)
{
    worker_t *w = worker_new(app, id);
    if (!w) {
        snprintf(err, errlen, "cannot create worker %d", id);
        return NULL;
    }
    if (posix_memalign((void **)&w->m, 64, sizeof *w->m) != 0) {
        snprintf(err, errlen, "out of memory");
        worker_free(w);
        return NULL;
    }
    memset(w->m, 0, sizeof *w->m);
    if (auth_cache_init(w) < 0 || admission_cache_init(w) < 0 || ratelimit_worker_init(w) < 0 ||
        room_worker_init(w) < 0) {
        snprintf(err, errlen, "out of memory");
        free_worker(w);
        return NULL;
    }
    w->rds = rds_new(w, addr, app->cfg.redis_timeout_ms);
    if (!w->rds) {
        snprintf(err, errlen, "cannot create the Redis client of worker %d", id);
        free_worker(w);
        return NULL;
    }
    if (revoke_init(w, addr, (uint64_t)auth_ttl_s(w) * 1000u, auth_forget) < 0) {
        snprintf(err, errlen, "cannot create the revocation subscriber of worker %d", id);
        free_worker(w);
        return NULL;
    }
    if (http_worker_init(w, app->cfg.listen_host, app->cfg.listen_port, api_dispatch, err, errlen) < 0) {
        free_worker(w);
        return NULL;
    }
    /* Plain Redis only: a cluster client connects to each node on first use, so there is
     * no "up" to wait for before the first command (it retries within its deadline). */
    if (!addr->cluster) {
        w->on_redis_up = on_worker_redis_up;
        http_worker_hold_accept(w, app->cfg.redis_timeout_ms > 2000 ? app->cfg.redis_timeout_ms
                                                                    : 2000);
    }
    if (id == 0 && board_init(w) < 0) {
        snprintf(err, errlen, "cannot start the sale board's announcements");
        free_worker(w);
        return NULL;
    }
    return w;
}

/* A flash-sale voucher's creation as the walk-through prints it: title and stock. */
static void print_create(const char *url, const char *token, const char *title, int stock)
{
    printf("  curl -s -X POST %s/voucher/seckill -H 'x-admin-token: %s' \\\n"
           "       -d '{\"shopId\":1,\"title\":\"%s\",\"payValue\":8000,\"actualValue\":10000,"
           "\"type\":1,\"stock\":%d,\"beginTime\":\"2020-01-01T00:00:00\","
           "\"endTime\":\"2099-01-01T00:00:00\"}'\n",
           url, token, title, stock);
}

/* This binary's path as the reader can type it: relative when it lies under the current
 * directory (build/seckill in the source tree), else absolute; "seckill" if unknown. */
static void self_path(char *out, size_t len)
{
    char exe[PATH_MAX], cwd[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    snprintf(out, len, "seckill");
    if (n <= 0)
        return;
    exe[n] = '\0';
    size_t cl = getcwd(cwd, sizeof cwd) ? strlen(cwd) : 0;
    if (cl > 0 && strncmp(exe, cwd, cl) == 0 && exe[cl] == '/')
        snprintf(out, len, "%s", exe + cl + 1);
    else
        snprintf(out, len, "%s", exe);
}

static void print_ready(const app_t *app, int embedded)
{
    const char *h = app->cfg.listen_host;
    int p = app->cfg.listen_port;
    char url[300];
    snprintf(url, sizeof url, strchr(h, ':') ? "http://[%s]:%d" : "http://%s:%d", h, p);
    log_info("ready: %s (mode %s, %d worker threads, instance %s, slot %u)", url,
             app->cfg.mode_name, app->nworkers, app->name, app->instance_slot);
    /* The how-to goes to stdout, for the person who just typed the command. */
    const char *token = embedded ? app->admin_token : "<admin token>";
    char self[PATH_MAX], tkey[PATH_MAX];
    self_path(self, sizeof self);
    if (app->cfg.token_key_file[0])
        snprintf(tkey, sizeof tkey, "%s", app->cfg.token_key_file);
    else
        snprintf(tkey, sizeof tkey, "%s/token-key", app->cfg.data_dir);
    printf("\nseckill is serving %s\n", url);
    if (embedded)
        printf("admin token: %s   (kept in %s/admin-token)\n", app->admin_token, app->cfg.data_dir);
    else if (app->admin_token[0])
        printf("admin token: as configured\n");
    printf("sale board:  %s/admin/   (every sale's stock and buyers, live; it asks for the "
           "admin token)\n", url);
    printf("\nTry a flash sale:\n"
           "  # 1. create two flash-sale vouchers (on sale from 2020 to 2099): stock 100, and "
           "stock 1;\n"
           "  #    each answer's data is the voucher's id\n");
    print_create(url, token, "100元代金券", 100);
    print_create(url, token, "1元秒杀券", 1);
    printf("  # 2. ask for a login code: %s\n"
           "  curl -s -X POST '%s/user/code?phone=13800000000'\n"
           "  # 3. log in with it; the reply's data is your token\n"
           "  curl -s -X POST %s/user/login -d '{\"phone\":\"13800000000\",\"code\":\"<code>\"}'\n"
           "  # 4. buy: data is your order id. Twice the stock-100 voucher: the second says "
           "不能重复下单;\n"
           "  #    twice the stock-1 voucher: it is sold out, the second says 库存不足\n"
           "  curl -s -X POST %s/voucher-order/seckill/<voucherId> -H 'authorization: <token>'\n"
           "  # 5. a whole sale with 2,000 buyers, audited: the board shows it as it runs\n"
           "  %s bench %s%s%s%s%s --seed-tokens --users 2000 --stock 500\n\n",
           app->log_login_codes ? "it is written to this log (there is no SMS gateway)"
           : app->cfg.code_command[0] ? "--code-command delivers it"
                                      : "it is delivered nowhere (see --code-command)",
           url, url, url, self,
           embedded ? "--data-dir " : "--target ", embedded ? app->cfg.data_dir : url,
           embedded ? "" : " --redis <url> --db <url> --admin-token <admin token>",
           /* bench signs its buyers' tokens with the service's key, or they are all 401 */
           embedded ? "" : " --token-key-file ", embedded ? "" : tkey);
    if (embedded)
        printf("Stop: Ctrl-C. Start afresh (every voucher, user and order gone): stop, remove "
               "%s\n(in the source tree: make reset), start again.\n\n", app->cfg.data_dir);
    else
        printf("Stop: Ctrl-C (SIGTERM: answers what is in flight, the writer commits what it "
               "has).\n\n");
    fflush(stdout);
}

int server_run(const config_t *cfg)
{
    char err[1024] = "";
    int rc = 1, embedded = 0, nstarted = 0;
    app_t *app = xcalloc(1, sizeof *app);
    app->cfg = *cfg;
    /* Secrets named by file go into app->cfg; from here on cfg is that copy. */
    if (config_read_secrets(&app->cfg, err, sizeof err) < 0) {
        fprintf(stderr, "seckill: %s\n", err);
        free(app);
        return 1;
    }
    cfg = &app->cfg;
    log_set_level(cfg->log_level);
    log_set_thread_name("main");

    /* Signals are handled by sigtimedwait() below; every thread inherits this mask. */
    sigset_t sigs;
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGINT);
    sigaddset(&sigs, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &sigs, NULL);
    signal(SIGPIPE, SIG_IGN);

    /* Everything this process creates -- the database and its WAL, the private Redis's
     * files, the admin token -- is for this user only. */
    umask(077);
    if (datadir_prepare(cfg->data_dir, err, sizeof err) < 0)
        goto out;

    /* Descriptors for max-conns x workers, and the per-address connection cap; before
     * anything is opened, so an impossible --max-conns stops us at once. The process's
     * own beyond what is open now: Redis and SQL connections, event loops, listeners. */
    if (fdlimit_raise(&app->cfg, 64 + 16 * app->cfg.threads + 4 * JOB_THREADS, err, sizeof err) < 0)
        goto out;
    if (cfg->max_conns_per_ip > 0)
        app->connlimit = connlimit_new(cfg->max_conns_per_ip);

    /* 1. Redis: configured, or a private child. */
    if (cfg->redis_url[0]) {
        snprintf(app->redis_url, sizeof app->redis_url, "%s", cfg->redis_url);
    } else {
        embedded = 1;
        log_info("no --redis given: starting a private redis-server under %s/redis", cfg->data_dir);
        app->child = redis_child_start(cfg->redis_server_bin, datadir_pinned(), cfg->appendfsync_always,
                                       app->redis_url, sizeof app->redis_url, err, sizeof err);
        if (!app->child)
            goto out;
        log_info("private redis-server ready at %s (AOF on, appendfsync %s)", app->redis_url,
                 cfg->appendfsync_always ? "always" : "everysec");
    }
    if (redis_prepare(app, err, sizeof err) < 0)
        goto out;
    orderid_init(app->instance_slot);
    char shown[1100];
    log_info("redis %s reachable; order-id slot %u", url_redact(app->redis_url, shown, sizeof shown),
             app->instance_slot);

    /* 2. SQL: open once here so schema problems stop us before we listen. */
    if (cfg->db_url[0])
        snprintf(app->db_url, sizeof app->db_url, "%s", cfg->db_url);
    else
        snprintf(app->db_url, sizeof app->db_url, "sqlite:%s/seckill.db", datadir_pinned());
    {
        store_t *s = store_open(app->db_url, cfg->sql_timeout_ms, err, sizeof err);
        if (!s)
            goto out;
        store_close(s);
    }
    atomic_store(&app->sql_up, 1);
    log_info("database %s ready (schema checked)", url_redact(app->db_url, shown, sizeof shown));

    /* Login codes: the embedded default has no other way to show them. */
    app->log_login_codes = cfg->log_login_codes || embedded;
    if (cfg->code_command[0])
        log_info("login codes are delivered by --code-command (time limit %d ms)%s",
                 cfg->code_command_timeout_ms,
                 app->log_login_codes ? " and written to the log" : "");
    else if (!app->log_login_codes)
        log_warn("login codes are neither delivered nor logged: set --code-command (or "
                 "--log-login-codes for a test deployment)");

    /* 3. Identity: admin token and consumer name. */
    if (cfg->admin_token[0]) {
        if (strlen(cfg->admin_token) < ADMIN_TOKEN_MIN) {
            snprintf(err, sizeof err, "the admin token is too short (%zu characters): use at "
                     "least %d, e.g. `head -c 16 /dev/urandom | xxd -p` (--admin-token-file)",
                     strlen(cfg->admin_token), ADMIN_TOKEN_MIN);
            goto out;
        }
        const char *weak = secret_weak(cfg->admin_token, strlen(cfg->admin_token));
        if (weak != NULL) {
            snprintf(err, sizeof err, "the admin token has %s", weak);
            goto out;
        }
        snprintf(app->admin_token, sizeof app->admin_token, "%s", cfg->admin_token);
    } else if (embedded) {
        if (embedded_admin_token(app, err, sizeof err) < 0)
            goto out;
    } else {
        log_warn("no --admin-token configured: voucher creation is refused");
    }
    if (paykey_init(cfg, embedded, err, sizeof err) < 0)
        goto out;
    if (cfg->name[0]) {
        snprintf(app->name, sizeof app->name, "%s", cfg->name);
    } else if (embedded) {
        /* A private Redis has exactly one consumer: a stable name lets a restart finish
         * its own pending entries at once instead of waiting for them to look idle. */
        snprintf(app->name, sizeof app->name, "local");
    } else {
        char host[64] = "host";
        gethostname(host, sizeof host - 1);
        snprintf(app->name, sizeof app->name, "%s:%d", host, (int)getpid());
    }

    if (token_key_setup(app, err, sizeof err) < 0)
        goto out;

    /* 4. Background parts. */
    app->metrics = xcalloc(1, sizeof *app->metrics);
    if (cfg->trusted_proxy[0]) {
        app->trusted = xcalloc(1, sizeof *app->trusted);
        if (clientip_parse(cfg->trusted_proxy, app->trusted, err, sizeof err) < 0)
            goto out;
        log_info("X-Forwarded-For is believed from %d trusted proxy address(es)", app->trusted->n);
    }
    if (ratelimit_app_init(app) < 0) {
        snprintf(err, sizeof err, "out of memory (rate-limit tables)");
        goto out;
    }
    /* A mode whose orders block a pool thread each says how many it needs (order_mode.h). */
    const order_mode_row_t *mode = order_mode_row(cfg->mode);
    app->jobs = jobs_new(mode->job_threads > 0 ? mode->job_threads : JOB_THREADS, app->db_url,
                         cfg->sql_timeout_ms, JOB_QUEUE_MAX, err, sizeof err);
    if (!app->jobs)
        goto out;
    app->writer = writer_start(app, err, sizeof err);
    if (!app->writer)
        goto out;
    log_info("order writer started as consumer \"%s\" of group %s", app->name, KEY_GROUP);
    if (cfg->mode != MODE_SYNC) {
        /* Sync mode sells from SQL alone: nothing in Redis to rebuild. */
        app->rebuild = rebuild_watch_start(app, err, sizeof err);
        if (!app->rebuild)
            goto out;
    }
    if (cfg->mode == MODE_SYNC) {
        if (sync_order_init(app, err, sizeof err) < 0)
            goto out;
        log_info("sync mode: every order is one SQL transaction under a per-user lock");
    }
    if (mode->start && mode->start(app, err, sizeof err) < 0)
        goto out;
    if (cfg->mode == MODE_QUEUE) {
        /* The stream writer still runs: it drains any stream entries left from an
         * earlier run in stream mode. New orders go through the in-process queue. */
        app->ordq = ordq_start(app, cfg->queue_capacity, err, sizeof err);
        if (!app->ordq)
            goto out;
        log_warn("queue mode: admitted orders wait in this process's memory (capacity %zu) "
                 "and are LOST if it dies before writing them; stream mode does not lose them",
                 cfg->queue_capacity);
    }

    /* 5. Workers: every one listens before any starts, so a busy port fails cleanly. */
    static const metrics_probes_t probes = {probe_http_conns, probe_redis_up};
    metrics_set_probes(&probes);
    url_redis_t addr;
    if (url_parse_redis(app->redis_url, &addr) < 0) {
        snprintf(err, sizeof err, "bad Redis URL \"%s\"",
                 url_redact(app->redis_url, shown, sizeof shown));
        goto out;
    }
    app->workers = xcalloc((size_t)cfg->threads, sizeof *app->workers);
    for (int i = 0; i < cfg->threads; i++) {
        app->workers[i] = make_worker(app, i, &addr, err, sizeof err);
        if (!app->workers[i])
            goto out;
        app->nworkers = i + 1;
    }
    for (int i = 0; i < app->nworkers; i++) {
        if (worker_start(app->workers[i], worker_main) != 0) {
            snprintf(err, sizeof err, "cannot start worker thread %d", i);
            goto out;
        }
        nstarted = i + 1;
    }
    print_ready(app, embedded);

    /* Wait for SIGINT/SIGTERM; on the embedded default, look after the private Redis
     * meanwhile (a dead one is started again: redis_child.h). */
    int sig;
    do {
        struct timespec tick = { 0, 250 * 1000000L };
        sig = sigtimedwait(&sigs, NULL, app->child ? &tick : NULL);
        if (sig < 0)
            redis_child_watch(app->child);
    } while (sig != SIGINT && sig != SIGTERM);
    log_info("%s received: stopping (in-flight requests finish, the writer commits what it has)",
             sig == SIGINT ? "SIGINT" : "SIGTERM");
    rc = 0;

out:
    if (rc != 0 && err[0]) {
        fprintf(stderr, "seckill: %s\n", err);
        log_error("%s", err);
    }
    atomic_store(&app->stopping, 1);
    for (int i = 0; i < nstarted; i++)
        worker_post(app->workers[i], worker_stop_fn, NULL);
    for (int i = 0; i < nstarted; i++)
        pthread_join(app->workers[i]->thread, NULL);
    /* The job pool may still hold a job whose completion is posted to a worker, so the
     * pool goes before the workers are freed. */
    ordq_stop(app->ordq);
    rebuild_watch_stop(app->rebuild);
    writer_stop(app->writer);
    jobs_free(app->jobs);
    sync_order_free(app);   /* after the pool: its jobs hold the locks */
    if (order_mode_row(cfg->mode)->stop)
        order_mode_row(cfg->mode)->stop(app);   /* after the pool too: its jobs use its state */
    for (int i = 0; i < app->nworkers; i++)
        free_worker(app->workers[i]);
    free(app->workers);
    redis_child_stop(app->child);
    ratelimit_app_free(app);
    free(app->trusted);
    free(app->metrics);
    token_signer_free(app->signer);
    pow_free(app);
    connlimit_free(app->connlimit);
    if (rc == 0)
        log_info("stopped cleanly");
    free(app);
    return rc;
}

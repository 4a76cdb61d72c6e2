/* redis_tool.c -- `seckill redis rebuild`: rebuild vouchers' Redis keys from SQL, by hand
 * (and the dispatch to `seckill redis lock-check`, lockcheck.c).
 *
 * The service does this by itself (rebuild_watch.c); the command is for an operator who
 * wants it now, or wants to see first what it would write (--dry-run). It uses the same
 * code (rebuild.c), the same lock and the same generation bump, so it is safe to run
 * beside live instances and as often as wanted: a voucher whose keys are in Redis is left
 * alone. */
#include "cmd/redis_tool.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <hiredis/hiredis.h>

#include "sale/bucket_sweep.h"
#include "core/datadir.h"
#include "core/key.h"
#include "redis/rcl_sync.h"
#include "rebuild/rebuild.h"
#include "store/store.h"
#include "cmd/cmd_args.h"
#include "cmd/lockcheck.h"

#define MAX_VOUCHERS 256

typedef struct rebuild_args {
    const char *data_dir, *redis, *db;
    int64_t vouchers[MAX_VOUCHERS];
    size_t nvouchers;
    int dry_run, timeout_ms, pay_timeout_s;
} rebuild_args_t;

#define F(field) CMD_ARGS_FIELD(rebuild_args_t, field)

static const cmd_arg_t rebuild_arg_rows[] = {
    {"voucher", CMD_ARG_I64S, F(vouchers), 1, 9e18, "ID",
     "this voucher (repeatable); default: every flash-sale voucher\n"
     "whose sale has not ended", offsetof(rebuild_args_t, nvouchers)},
    {"dry-run", CMD_ARG_SET, CMD_ARGS_SET(rebuild_args_t, dry_run, 1), 0, 0, NULL,
     "print what would be written; write nothing"},
    {"data-dir", CMD_ARG_PTR, F(data_dir), 0, 0, "DIR",
     "the embedded default's files (default ./var when neither\n"
     "--redis nor --db is given)"},
    {"redis", CMD_ARG_PTR, F(redis), 0, 0, "URL",
     "redis://[:password@]host:port[/db] or unix:PATH"},
    {"db", CMD_ARG_PTR, F(db), 0, 0, "URL", "the service's SQL URL (sqlite:PATH, mysql://...)"},
    {"timeout-ms", CMD_ARG_INT, F(timeout_ms), 10, 600000, "N",
     "deadline of each Redis command and SQL call [10000]"},
    {"pay-timeout-s", CMD_ARG_INT, F(pay_timeout_s), 0, 86400 * 365, "S",
     "the service's --pay-timeout-s: a cancelled order SQL updated this\n"
     "long after its creation is rebuilt as timed out (0: as cancelled) [900]"},
};
static const cmd_args_t rebuild_args_spec = {
    rebuild_arg_rows, sizeof rebuild_arg_rows / sizeof rebuild_arg_rows[0], 20};

static void usage(FILE *f)
{
    fprintf(f,
            "usage: seckill redis rebuild [options]\n\n"
            "Republishes flash-sale vouchers whose keys Redis lost, from SQL: stock = SQL\n"
            "stock, buyers = every user with an SQL order, window from SQL. A voucher whose\n"
            "keys are present is left alone, so running it again changes nothing.\n"
            "Exit status 0 = done (or nothing to do), 1 = a voucher could not be rebuilt,\n"
            "2 = bad usage or no connection.\n\n");
    cmd_args_help(f, &rebuild_args_spec);
}

/* Flash-sale vouchers whose sale has not ended. */
static int live_vouchers(store_t *st, int64_t **out, size_t *n)
{
    int64_t *ids = NULL;
    size_t nids = 0;
    if (store_seckill_ids(st, &ids, &nids) != STORE_OK)
        return -1;
    int64_t now = (int64_t)time(NULL);
    *n = 0;
    for (size_t i = 0; i < nids; i++) {
        store_voucher_t v;
        memset(&v, 0, sizeof v);
        int rc = store_voucher_get(st, ids[i], &v);
        int live = rc == STORE_OK && v.is_seckill && v.end_time > now;
        store_voucher_clear(&v);
        if (rc == STORE_ERR) {
            free(ids);
            return -1;
        }
        if (live)
            ids[(*n)++] = ids[i];
    }
    *out = ids;
    return 0;
}

static int rebuild_cmd(int argc, char **argv)
{
    rebuild_args_t a = {.timeout_ms = 10000, .pay_timeout_s = 900};
    int exit_now =
        cmd_args_main(&rebuild_args_spec, "seckill redis rebuild", usage, argc, argv, &a);
    if (exit_now >= 0)
        return exit_now;
    char err[PATH_MAX + 64];
    char rbuf[DATADIR_URL_MAX], dbuf[DATADIR_URL_MAX];
    if (datadir_urls(a.data_dir, &a.redis, &a.db, rbuf, dbuf, err, sizeof err) < 0) {
        fprintf(stderr, "seckill redis rebuild: %s\n", err);
        return 2;
    }
    int dry = a.dry_run, tmo = a.timeout_ms;
    size_t nv = a.nvouchers;
    store_t *st = store_open(a.db, tmo, err, sizeof err);
    if (!st) {
        fprintf(stderr, "seckill redis rebuild: %s\n", err);
        return 2;
    }
    rcl_sync_route_t rt;   /* one Redis, or a cluster: each voucher on its node */
    if (rcl_sync_route_open(a.redis, tmo, &rt, err, sizeof err) < 0) {
        fprintf(stderr, "seckill redis rebuild: %s\n", err);
        store_close(st);
        return 2;
    }
    int64_t *all = NULL;
    const int64_t *list = a.vouchers;
    if (nv == 0) {
        if (live_vouchers(st, &all, &nv) != 0) {
            fprintf(stderr, "seckill redis rebuild: SQL: %s\n", store_errmsg(st));
            rcl_sync_route_close(&rt);
            store_close(st);
            return 2;
        }
        list = all;
    }
    rebuild_opts_t o = {.dry_run = dry, .owner = "seckill-redis-rebuild", .plan = stdout, .rt = &rt,
                        .pay_timeout_s = a.pay_timeout_s};
    int status = 0;
    size_t done = 0, present = 0;
    for (size_t i = 0; i < nv; i++) {
        rebuild_result_t res;
        char kv[64];
        redisContext *c = NULL, *g = NULL;
        int rc = REBUILD_ERR;
        uint64_t retry_until = rcl_sync_route_deadline(&rt);
        if (key_voucher(kv, sizeof kv, list[i]) < 0)
            snprintf(err, sizeof err, "voucher id out of range");
        else
            do   /* again on a new map when a failover or reshard cut it short */
                if ((c = rcl_sync_route_key(&rt, kv, err, sizeof err)) &&
                    (g = rcl_sync_route_key(&rt, KEY_STREAMS, err, sizeof err)))
                    rc = rebuild_voucher(c, g, st, list[i], &o, &res, err, sizeof err);
            while (rc == REBUILD_ERR && rcl_sync_route_retry(&rt, retry_until, err));
        switch (rc) {
        case REBUILD_DONE:
            done++;
            printf("voucher %lld: %s: stock %lld, %lld buyers, generation %lld\n",
                   (long long)list[i], dry ? "would be rebuilt" : "rebuilt",
                   (long long)res.stock, (long long)res.buyers, (long long)res.epoch);
            break;
        case REBUILD_PRESENT:
            present++;
            printf("voucher %lld: keys present in Redis, nothing to do\n", (long long)list[i]);
            break;
        case REBUILD_BUSY:
            printf("voucher %lld: another instance is rebuilding it now\n", (long long)list[i]);
            break;
        case REBUILD_REFUSED:
            fprintf(stderr, "voucher %lld: not rebuilt: %s\n", (long long)list[i], err);
            status = 1;
            break;
        case REBUILD_NOT_SALE:
            fprintf(stderr, "voucher %lld: not on sale in SQL (no flash-sale voucher, or off shelf, expired or type 0)\n", (long long)list[i]);
            status = 1;
            break;
        default:
            fprintf(stderr, "voucher %lld: rebuild failed: %s\n", (long long)list[i], err);
            status = 1;
        }
    }
    printf("%zu vouchers: %zu %s, %zu present\n", nv, done, dry ? "to rebuild" : "rebuilt",
           present);
    free(all);
    rcl_sync_route_close(&rt);
    store_close(st);
    return status;
}

int redis_tool_main(int argc, char **argv)
{
    if (argc >= 2 && strcmp(argv[1], "rebuild") == 0)
        return rebuild_cmd(argc - 1, argv + 1);
    if (argc >= 2 && strcmp(argv[1], "lock-check") == 0)
        return lockcheck_main(argc - 1, argv + 1);
    if (argc >= 2 && (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0)) {
        usage(stdout);
        return 0;
    }
    fprintf(stderr, "usage: seckill redis rebuild [--voucher ID] [--dry-run] (see --help)\n"
                    "       seckill redis lock-check --redis URL (see lock-check --help)\n");
    return 2;
}

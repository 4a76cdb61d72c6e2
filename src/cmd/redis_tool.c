/* redis_tool.c -- `seckill redis rebuild`: rebuild vouchers' Redis keys from SQL, by hand
 * (and the dispatch to `seckill redis lock-check`, lockcheck.c).
 *
 * The service does this by itself (rebuild_watch.c); the command is for an operator who
 * wants it now, or wants to see first what it would write (--dry-run). It uses the same
 * code (rebuild.c), the same lock and the same generation bump, so it is safe to run
 * beside live instances and as often as wanted: a voucher whose keys are in Redis is left
 * alone. */
#include "cmd/redis_tool.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <hiredis/hiredis.h>

#include "sale/bucket_sweep.h"
#include "core/key.h"
#include "redis/rcl_sync.h"
#include "rebuild/rebuild.h"
#include "store/store.h"
#include "cmd/datadir.h"
#include "cmd/lockcheck.h"

#define MAX_VOUCHERS 256

static void usage(FILE *f)
{
    fprintf(f,
            "usage: seckill redis rebuild [options]\n\n"
            "Republishes flash-sale vouchers whose keys Redis lost, from SQL: stock = SQL\n"
            "stock, buyers = every user with an SQL order, window from SQL. A voucher whose\n"
            "keys are present is left alone, so running it again changes nothing.\n"
            "Exit status 0 = done (or nothing to do), 1 = a voucher could not be rebuilt,\n"
            "2 = bad usage or no connection.\n\n"
            "  --voucher ID         this voucher (repeatable); default: every flash-sale voucher\n"
            "                       whose sale has not ended\n"
            "  --dry-run            print what would be written; write nothing\n"
            "  --data-dir DIR       the embedded default's files (default ./var when neither\n"
            "                       --redis nor --db is given)\n"
            "  --redis URL          redis://[:password@]host:port[/db] or unix:PATH\n"
            "  --db URL             the service's SQL URL (sqlite:PATH, mysql://...)\n"
            "  --timeout-ms N       deadline of each Redis command and SQL call [10000]\n");
}

static int parse_id(const char *z, int64_t *out)
{
    char *end;
    errno = 0;
    long long v = strtoll(z, &end, 10);
    if (errno || end == z || *end || v <= 0)
        return -1;
    *out = v;
    return 0;
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
    const char *data_dir = NULL, *redis = NULL, *db = NULL;
    int64_t vids[MAX_VOUCHERS];
    size_t nv = 0;
    int dry = 0, tmo = 10000;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            usage(stdout);
            return 0;
        }
        if (strcmp(a, "--dry-run") == 0) {
            dry = 1;
            continue;
        }
        if (i + 1 >= argc) {
            fprintf(stderr, "seckill redis rebuild: %s needs a value (see --help)\n", a);
            return 2;
        }
        const char *v = argv[++i];
        int64_t x;
        if (strcmp(a, "--data-dir") == 0)
            data_dir = v;
        else if (strcmp(a, "--redis") == 0)
            redis = v;
        else if (strcmp(a, "--db") == 0)
            db = v;
        else if (strcmp(a, "--voucher") == 0 && parse_id(v, &x) == 0 && nv < MAX_VOUCHERS)
            vids[nv++] = x;
        else if (strcmp(a, "--timeout-ms") == 0 && parse_id(v, &x) == 0 && x >= 10 && x <= 600000)
            tmo = (int)x;
        else {
            fprintf(stderr, "seckill redis rebuild: bad option or value: %s %s (see --help)\n",
                    a, v);
            return 2;
        }
    }
    char rbuf[DATADIR_URL_MAX], dbuf[DATADIR_URL_MAX];
    int urc = datadir_urls("seckill redis rebuild", data_dir, &redis, &db, rbuf, dbuf);
    if (urc != 0)
        return urc;
    char err[512];
    store_t *st = store_open(db, tmo, err, sizeof err);
    if (!st) {
        fprintf(stderr, "seckill redis rebuild: %s\n", err);
        return 2;
    }
    rcl_sync_route_t rt;   /* one Redis, or a cluster: each voucher on its node */
    if (rcl_sync_route_open(redis, tmo, &rt, err, sizeof err) < 0) {
        fprintf(stderr, "seckill redis rebuild: %s\n", err);
        store_close(st);
        return 2;
    }
    int64_t *all = NULL;
    const int64_t *list = vids;
    if (nv == 0) {
        if (live_vouchers(st, &all, &nv) != 0) {
            fprintf(stderr, "seckill redis rebuild: SQL: %s\n", store_errmsg(st));
            rcl_sync_route_close(&rt);
            store_close(st);
            return 2;
        }
        list = all;
    }
    rebuild_opts_t o = {.dry_run = dry, .owner = "seckill-redis-rebuild", .plan = stdout, .rt = &rt};
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
            fprintf(stderr, "voucher %lld: not a flash-sale voucher in SQL\n", (long long)list[i]);
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

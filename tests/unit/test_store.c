/* test_store.c -- the SQLite store (store.h) on a temporary file.
 *
 * Each test gets a fresh database in its own temp directory. Covers: schema creation is
 * idempotent and starts the ids where the course's do; users (duplicate phone returns the
 * existing user); vouchers (normal vs flash sale, status filter); the order batch write
 * (replay-safe, one order per user and voucher, id collisions counted, stock decremented
 * only by what was inserted); order lookups; the per-call deadline under a held lock. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "clock.h"
#include "store.h"

typedef struct fx {
    char dir[64];
    char path[128];
    char url[160];
    store_t *s;
} fx_t;

static store_t *open_ok(const char *url, int timeout_ms)
{
    char err[256] = "";
    store_t *s = store_open(url, timeout_ms, err, sizeof err);
    if (!s)
        fail_msg("store_open(%s): %s", url, err);
    return s;
}

static int setup(void **state)
{
    fx_t *f = calloc(1, sizeof *f);
    snprintf(f->dir, sizeof f->dir, "/tmp/test_store.XXXXXX");
    if (!mkdtemp(f->dir))
        return -1;
    snprintf(f->path, sizeof f->path, "%s/t.db", f->dir);
    snprintf(f->url, sizeof f->url, "sqlite:%s", f->path);
    f->s = open_ok(f->url, 2000);
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    fx_t *f = *state;
    char p[160];
    store_close(f->s);
    const char *sfx[] = {"", "-wal", "-shm", "-journal"};
    for (size_t i = 0; i < sizeof sfx / sizeof sfx[0]; i++) {
        snprintf(p, sizeof p, "%s%s", f->path, sfx[i]);
        unlink(p);
    }
    rmdir(f->dir);
    free(f);
    return 0;
}

static int64_t create_seckill(store_t *s, int64_t shop, int64_t stock)
{
    store_voucher_t v = {0};
    v.shop_id = shop;
    v.title = "100元代金券";
    v.sub_title = "周一至周五均可使用";
    v.rules = "全场通用\\n无需预约";
    v.pay_value = 8000;
    v.actual_value = 10000;
    v.type = 1;
    v.status = 1;
    v.is_seckill = 1;
    v.stock = stock;
    v.begin_time = 1700000000;
    v.end_time = 1700086400;
    assert_int_equal(store_voucher_create(s, &v), STORE_OK);
    assert_true(v.id > 0);
    return v.id;
}

static void test_schema_idempotent(void **state)
{
    fx_t *f = *state;
    /* A second and third open of the same file (schema already there) work, and the
     * first ids are the course's: user 1010, voucher 10. */
    store_t *s2 = open_ok(f->url, 2000);
    store_close(s2);
    s2 = open_ok(f->url, 2000);
    store_user_t u;
    assert_int_equal(store_user_create(s2, "13800000001", "user_a", &u), STORE_OK);
    assert_int_equal(u.id, 1010);
    int64_t vid = create_seckill(s2, 1, 5);
    assert_int_equal(vid, 10);
    store_close(s2);
    assert_int_equal(store_ping(f->s), STORE_OK);

    /* Run the schema again by hand: nothing changes, nothing fails. */
    sqlite3 *db;
    assert_int_equal(sqlite3_open(f->path, &db), SQLITE_OK);
    assert_int_equal(sqlite3_exec(db, "PRAGMA user_version = 0", NULL, NULL, NULL), SQLITE_OK);
    sqlite3_close(db);
    s2 = open_ok(f->url, 2000);
    assert_int_equal(store_user_by_phone(s2, "13800000001", &u), STORE_OK);
    assert_int_equal(u.id, 1010);
    assert_int_equal(store_user_create(s2, "13800000002", "user_b", &u), STORE_OK);
    assert_int_equal(u.id, 1011);
    store_close(s2);
}

static void test_newer_schema_refused(void **state)
{
    fx_t *f = *state;
    sqlite3 *db;
    assert_int_equal(sqlite3_open(f->path, &db), SQLITE_OK);
    assert_int_equal(sqlite3_exec(db, "PRAGMA user_version = 99", NULL, NULL, NULL), SQLITE_OK);
    sqlite3_close(db);
    char err[256] = "";
    store_t *s2 = store_open(f->url, 2000, err, sizeof err);
    assert_null(s2);
    assert_non_null(strstr(err, "newer"));
}

static void test_urls(void **state)
{
    (void)state;
    char err[256] = "";
    /* MySQL is its own backend now (test_store_mysql.c); nothing listens on port 1 */
    assert_null(store_open("mysql://u:p@127.0.0.1:1/hmdp", 1000, err, sizeof err));
    assert_non_null(strstr(err, "cannot connect"));
    assert_null(store_open("postgres://x", 1000, err, sizeof err));
    assert_non_null(strstr(err, "unknown"));
    assert_null(store_open("sqlite:", 1000, err, sizeof err));
    assert_null(store_open("/no/scheme", 1000, err, sizeof err));
    assert_null(store_open("sqlite:/nonexistent-dir/x/y.db", 1000, err, sizeof err));
    assert_true(err[0] != '\0');
    store_t *m = open_ok("sqlite::memory:", 1000);
    assert_int_equal(store_ping(m), STORE_OK);
    store_close(m);
    store_close(NULL);
    assert_non_null(store_errmsg(NULL));
}

static void test_users(void **state)
{
    fx_t *f = *state;
    store_user_t u, u2;
    assert_int_equal(store_user_by_phone(f->s, "13912345678", &u), STORE_NOTFOUND);
    assert_int_equal(store_user_create(f->s, "13912345678", "user_abcdefghij", &u), STORE_OK);
    assert_int_equal(u.id, 1010);
    assert_string_equal(u.phone, "13912345678");
    assert_string_equal(u.nick_name, "user_abcdefghij");
    assert_string_equal(u.icon, "");
    assert_int_equal(store_user_by_phone(f->s, "13912345678", &u2), STORE_OK);
    assert_int_equal(u2.id, u.id);
    /* The same phone again (a concurrent login): the existing user, not a new one. */
    assert_int_equal(store_user_create(f->s, "13912345678", "user_other", &u2), STORE_OK);
    assert_int_equal(u2.id, 1010);
    assert_string_equal(u2.nick_name, "user_abcdefghij");
    assert_int_equal(store_user_create(f->s, "13912345679", "user_2", &u2), STORE_OK);
    assert_int_equal(u2.id, 1011);
}

static void test_vouchers(void **state)
{
    fx_t *f = *state;
    store_voucher_t v = {0};
    v.shop_id = 1;
    v.title = "50元代金券";
    v.sub_title = NULL;   /* a NULL column stays NULL (the API omits it) */
    v.rules = "全场通用";
    v.pay_value = 4750;
    v.actual_value = 5000;
    v.type = 0;
    v.status = 1;
    assert_int_equal(store_voucher_create(f->s, &v), STORE_OK);
    assert_int_equal(v.id, 10);
    int64_t sk = create_seckill(f->s, 1, 100);
    assert_int_equal(sk, 11);
    store_voucher_t off = v;
    off.title = "off shelf";
    off.status = 2;
    assert_int_equal(store_voucher_create(f->s, &off), STORE_OK);
    assert_int_equal(off.id, 12);
    store_voucher_t other = v;
    other.shop_id = 2;
    assert_int_equal(store_voucher_create(f->s, &other), STORE_OK);

    store_voucher_t *list;
    size_t n;
    assert_int_equal(store_voucher_list(f->s, 1, &list, &n), STORE_OK);
    assert_int_equal(n, 2);
    assert_int_equal(list[0].id, 10);
    assert_int_equal(list[0].is_seckill, 0);
    assert_string_equal(list[0].title, "50元代金券");
    assert_null(list[0].sub_title);
    assert_string_equal(list[0].rules, "全场通用");
    assert_int_equal(list[0].pay_value, 4750);
    assert_int_equal(list[1].id, 11);
    assert_int_equal(list[1].is_seckill, 1);
    assert_int_equal(list[1].type, 1);
    assert_int_equal(list[1].stock, 100);
    assert_int_equal(list[1].begin_time, 1700000000);
    assert_int_equal(list[1].end_time, 1700086400);
    assert_string_equal(list[1].rules, "全场通用\\n无需预约");
    store_voucher_list_free(list, n);

    assert_int_equal(store_voucher_list(f->s, 999, &list, &n), STORE_OK);
    assert_int_equal(n, 0);
    store_voucher_list_free(list, n);

    store_voucher_t g;
    assert_int_equal(store_voucher_get(f->s, 12, &g), STORE_OK);   /* any status */
    assert_int_equal(g.status, 2);
    assert_string_equal(g.title, "off shelf");
    assert_int_equal(g.is_seckill, 0);
    store_voucher_clear(&g);
    assert_int_equal(store_voucher_get(f->s, 11, &g), STORE_OK);
    assert_int_equal(g.is_seckill, 1);
    assert_int_equal(g.stock, 100);
    store_voucher_clear(&g);
    assert_int_equal(store_voucher_get(f->s, 4242, &g), STORE_NOTFOUND);

    int64_t *ids;
    assert_int_equal(store_seckill_ids(f->s, &ids, &n), STORE_OK);
    assert_int_equal(n, 1);
    assert_int_equal(ids[0], 11);
    free(ids);

    int64_t orders, stock;
    assert_int_equal(store_voucher_counts(f->s, 11, &orders, &stock), STORE_OK);
    assert_int_equal(orders, 0);
    assert_int_equal(stock, 100);
    assert_int_equal(store_voucher_counts(f->s, 10, &orders, &stock), STORE_NOTFOUND);
}

static store_order_t mk(int64_t id, int64_t user, int64_t voucher, int64_t t)
{
    store_order_t o = {0};
    o.id = id;
    o.user_id = user;
    o.voucher_id = voucher;
    o.create_time = t;
    return o;
}

static void test_orders_idempotent(void **state)
{
    fx_t *f = *state;
    int64_t a = create_seckill(f->s, 1, 1000);
    int64_t b = create_seckill(f->s, 1, 10);
    enum { N = 300 };
    store_order_t *batch = calloc(N, sizeof *batch);
    int64_t t0 = 1700000100;
    for (int i = 0; i < N; i++)
        batch[i] = mk(1000000 + i, 5000 + i, i % 3 == 0 ? b : a, t0 + i % 7);
    size_t ins = 99, conf = 99;
    /* 100 of them are for b, which has stock 10: SQL stock may go negative (logged),
     * never refused -- the orders were admitted. */
    assert_int_equal(store_orders_write(f->s, batch, N, &ins, &conf, NULL), STORE_OK);
    assert_int_equal(ins, N);
    assert_int_equal(conf, 0);
    /* The same batch again: a replay, nothing inserted, stock untouched. */
    assert_int_equal(store_orders_write(f->s, batch, N, &ins, &conf, NULL), STORE_OK);
    assert_int_equal(ins, 0);
    assert_int_equal(conf, 0);
    int64_t orders, stock;
    assert_int_equal(store_voucher_counts(f->s, a, &orders, &stock), STORE_OK);
    assert_int_equal(orders, 200);
    assert_int_equal(stock, 800);
    assert_int_equal(store_voucher_counts(f->s, b, &orders, &stock), STORE_OK);
    assert_int_equal(orders, 100);
    assert_int_equal(stock, -90);

    /* A batch that repeats an order inside itself counts it once. */
    store_order_t twice[3] = {mk(2000001, 9001, a, t0), mk(2000001, 9001, a, t0),
                              mk(2000002, 9002, a, t0)};
    assert_int_equal(store_orders_write(f->s, twice, 3, &ins, &conf, NULL), STORE_OK);
    assert_int_equal(ins, 2);
    assert_int_equal(conf, 0);
    assert_int_equal(store_voucher_counts(f->s, a, &orders, &stock), STORE_OK);
    assert_int_equal(orders, 202);
    assert_int_equal(stock, 798);

    /* An empty batch is fine. */
    assert_int_equal(store_orders_write(f->s, batch, 0, &ins, &conf, NULL), STORE_OK);
    assert_int_equal(ins, 0);
    free(batch);

    store_order_t o;
    assert_int_equal(store_order_get(f->s, 1000001, &o), STORE_OK);
    assert_int_equal(o.user_id, 5001);
    assert_int_equal(o.voucher_id, a);
    assert_int_equal(o.status, 1);
    assert_int_equal(o.create_time, t0 + 1);
    assert_int_equal(store_order_get(f->s, 42, &o), STORE_NOTFOUND);
}

/* A rebuild of Redis from SQL raises the voucher's generation; orders admitted under an
 * older one are not written (fenced), orders of the new one and STORE_EPOCH_ANY are. */
static void test_orders_fenced_by_epoch(void **state)
{
    fx_t *f = *state;
    int64_t a = create_seckill(f->s, 1, 100);
    int64_t ep = -1;
    assert_int_equal(store_redis_epoch(f->s, a, 0, &ep), STORE_OK);
    assert_int_equal(ep, 0);
    assert_int_equal(store_redis_epoch(f->s, 999999, 1, &ep), STORE_NOTFOUND);
    int64_t t0 = 1700000100;
    store_order_t o0 = mk(3000001, 7001, a, t0);
    size_t ins = 9, conf = 9, fen = 9;
    assert_int_equal(store_orders_write(f->s, &o0, 1, &ins, &conf, &fen), STORE_OK);
    assert_int_equal(ins, 1);
    assert_int_equal(fen, 0);
    assert_int_equal(store_redis_epoch(f->s, a, 1, &ep), STORE_OK);
    assert_int_equal(ep, 1);
    assert_int_equal(store_redis_epoch(f->s, a, 0, &ep), STORE_OK);
    assert_int_equal(ep, 1);
    /* generation 0 after the bump: refused, stock untouched */
    store_order_t batch[3] = {mk(3000002, 7002, a, t0), mk(3000003, 7003, a, t0),
                              mk(3000004, 7004, a, t0)};
    batch[1].epoch = 1;
    batch[2].epoch = STORE_EPOCH_ANY;
    assert_int_equal(store_orders_write(f->s, batch, 3, &ins, &conf, &fen), STORE_OK);
    assert_int_equal(ins, 2);
    assert_int_equal(conf, 0);
    assert_int_equal(fen, 1);
    int64_t orders, stock;
    assert_int_equal(store_voucher_counts(f->s, a, &orders, &stock), STORE_OK);
    assert_int_equal(orders, 3);
    assert_int_equal(stock, 97);
    store_order_t got;
    assert_int_equal(store_order_get(f->s, 3000002, &got), STORE_NOTFOUND);
}

static void test_orders_dup_and_conflict(void **state)
{
    fx_t *f = *state;
    int64_t v = create_seckill(f->s, 1, 100);
    int64_t t = clock_wall_s();
    store_order_t first[2] = {mk(7001, 1010, v, t), mk(7002, 1011, v, t)};
    size_t ins, conf;
    assert_int_equal(store_orders_write(f->s, first, 2, &ins, &conf, NULL), STORE_OK);
    assert_int_equal(ins, 2);

    /* Same user and voucher under a new id: not inserted, not a conflict. */
    store_order_t dup = mk(7003, 1010, v, t);
    assert_int_equal(store_orders_write(f->s, &dup, 1, &ins, &conf, NULL), STORE_OK);
    assert_int_equal(ins, 0);
    assert_int_equal(conf, 0);
    store_order_t o;
    assert_int_equal(store_order_get(f->s, 7003, &o), STORE_NOTFOUND);

    /* An existing id with another user: a collision, counted, never overwritten. */
    store_order_t coll[2] = {mk(7001, 2222, v, t), mk(7004, 1012, v, t)};
    assert_int_equal(store_orders_write(f->s, coll, 2, &ins, &conf, NULL), STORE_OK);
    assert_int_equal(ins, 1);
    assert_int_equal(conf, 1);
    assert_int_equal(store_order_get(f->s, 7001, &o), STORE_OK);
    assert_int_equal(o.user_id, 1010);

    int64_t orders, stock;
    assert_int_equal(store_voucher_counts(f->s, v, &orders, &stock), STORE_OK);
    assert_int_equal(orders, 3);
    assert_int_equal(stock, 97);

    /* Orders of a voucher without a tb_seckill_voucher row are still written. */
    store_order_t lone = mk(7100, 1010, 987654, t);
    assert_int_equal(store_orders_write(f->s, &lone, 1, &ins, &conf, NULL), STORE_OK);
    assert_int_equal(ins, 1);
}

static void test_orders_of_user(void **state)
{
    fx_t *f = *state;
    int64_t v1 = create_seckill(f->s, 1, 10);
    int64_t v2 = create_seckill(f->s, 1, 10);
    int64_t v3 = create_seckill(f->s, 1, 10);
    store_order_t b[4] = {mk(300, 1010, v1, 1700000000), mk(301, 1010, v2, 1700000500),
                          mk(302, 1010, v3, 1700000200), mk(303, 1099, v1, 1700000900)};
    size_t ins, conf;
    assert_int_equal(store_orders_write(f->s, b, 4, &ins, &conf, NULL), STORE_OK);
    assert_int_equal(ins, 4);
    store_order_t *out;
    size_t n;
    assert_int_equal(store_orders_of_user(f->s, 1010, 10, &out, &n), STORE_OK);
    assert_int_equal(n, 3);
    assert_int_equal(out[0].id, 301);   /* newest first */
    assert_int_equal(out[1].id, 302);
    assert_int_equal(out[2].id, 300);
    assert_int_equal(out[0].create_time, 1700000500);
    free(out);
    assert_int_equal(store_orders_of_user(f->s, 1010, 2, &out, &n), STORE_OK);
    assert_int_equal(n, 2);
    free(out);
    assert_int_equal(store_orders_of_user(f->s, 5555, 10, &out, &n), STORE_OK);
    assert_int_equal(n, 0);
    free(out);
}

static void test_deadline_under_lock(void **state)
{
    fx_t *f = *state;
    int64_t v = create_seckill(f->s, 1, 10);
    store_t *s = open_ok(f->url, 200);
    sqlite3 *db;
    assert_int_equal(sqlite3_open(f->path, &db), SQLITE_OK);
    assert_int_equal(sqlite3_exec(db, "BEGIN EXCLUSIVE", NULL, NULL, NULL), SQLITE_OK);
    store_order_t o = mk(1, 2, v, 1700000000);
    size_t ins = 7, conf = 7;
    uint64_t t0 = clock_mono_ms();
    assert_int_equal(store_orders_write(s, &o, 1, &ins, &conf, NULL), STORE_ERR);
    uint64_t took = clock_mono_ms() - t0;
    assert_true(took >= 150 && took < 1500);
    assert_int_equal(ins, 0);
    assert_non_null(strstr(store_errmsg(s), "deadline"));
    assert_int_equal(sqlite3_exec(db, "COMMIT", NULL, NULL, NULL), SQLITE_OK);
    sqlite3_close(db);
    /* The lock is gone: the same batch goes through. */
    assert_int_equal(store_orders_write(s, &o, 1, &ins, &conf, NULL), STORE_OK);
    assert_int_equal(ins, 1);
    store_close(s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_schema_idempotent, setup, teardown),
        cmocka_unit_test_setup_teardown(test_newer_schema_refused, setup, teardown),
        cmocka_unit_test(test_urls),
        cmocka_unit_test_setup_teardown(test_users, setup, teardown),
        cmocka_unit_test_setup_teardown(test_vouchers, setup, teardown),
        cmocka_unit_test_setup_teardown(test_orders_idempotent, setup, teardown),
        cmocka_unit_test_setup_teardown(test_orders_dup_and_conflict, setup, teardown),
        cmocka_unit_test_setup_teardown(test_orders_fenced_by_epoch, setup, teardown),
        cmocka_unit_test_setup_teardown(test_orders_of_user, setup, teardown),
        cmocka_unit_test_setup_teardown(test_deadline_under_lock, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

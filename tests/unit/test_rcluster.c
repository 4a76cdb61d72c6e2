/* test_rcluster.c -- Redis Cluster arithmetic (rcluster.h): CRC16 and slots against the
 * specification's vectors, hash tags, CLUSTER SLOTS parsing (replies built from RESP text
 * by hiredis's own reader), redirect parsing and command key positions. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>
#include <hiredis/hiredis.h>

#include "redis/rcluster.h"

static unsigned slot_of(const char *k)
{
    return rcluster_slot(k, strlen(k));
}

static redisReply *resp(const char *text)
{
    redisReader *rd = redisReaderCreate();
    assert_non_null(rd);
    assert_int_equal(redisReaderFeed(rd, text, strlen(text)), REDIS_OK);
    void *out = NULL;
    assert_int_equal(redisReaderGetReply(rd, &out), REDIS_OK);
    assert_non_null(out);
    redisReaderFree(rd);
    return out;
}

static void test_crc16_and_slots(void **state)
{
    (void)state;
    assert_int_equal(rcluster_crc16("123456789", 9), 0x31C3);
    assert_int_equal(rcluster_crc16("", 0), 0);
    assert_int_equal(slot_of("foo"), 12182);
    assert_int_equal(slot_of("bar"), 5061);
    assert_int_equal(slot_of("123456789"), 0x31C3 & 16383);
    /* slots stay in range for any bytes */
    const char bin[4] = { '\0', '\xff', '{', '\x80' };
    assert_true(rcluster_slot(bin, sizeof bin) < 16384);
}

static void test_hash_tags(void **state)
{
    (void)state;
    /* the tag alone decides */
    assert_int_equal(slot_of("{user1000}.following"), slot_of("user1000"));
    assert_int_equal(slot_of("{user1000}.followers"), slot_of("user1000"));
    /* the service's voucher keys share one slot */
    assert_int_equal(slot_of("seckill:voucher:{42}"), slot_of("42"));
    assert_int_equal(slot_of("seckill:order:{42}"), slot_of("seckill:stream:{42}"));
    /* empty first tag: the whole key is hashed */
    assert_int_equal(slot_of("foo{}{bar}"), rcluster_crc16("foo{}{bar}", 10) & 16383);
    /* the tag runs from the first '{' to the first '}' after it */
    assert_int_equal(slot_of("foo{{bar}}zap"), slot_of("{bar"));
    assert_int_equal(slot_of("foo{bar}{zap}"), slot_of("bar"));
    /* no closing brace: the whole key */
    assert_int_equal(slot_of("foo{bar"), rcluster_crc16("foo{bar", 7) & 16383);
}

static const char SLOTS_3[] =
    "*3\r\n"
    "*4\r\n:0\r\n:5460\r\n"
    "*3\r\n$9\r\n127.0.0.1\r\n:7000\r\n$2\r\nid\r\n"
    "*3\r\n$9\r\n127.0.0.1\r\n:7004\r\n$2\r\nr1\r\n"
    "*3\r\n:5461\r\n:10922\r\n"
    "*4\r\n$9\r\n127.0.0.1\r\n:7001\r\n$2\r\nid\r\n*0\r\n"
    "*3\r\n:10923\r\n:16383\r\n"
    "*3\r\n$0\r\n\r\n:7002\r\n$2\r\nid\r\n";

static void test_map_load(void **state)
{
    (void)state;
    rcluster_map_t m;
    rcluster_map_init(&m);
    assert_int_equal(rcluster_map_owner(&m, 0), -1);
    redisReply *r = resp(SLOTS_3);
    assert_int_equal(rcluster_map_load(&m, r, "10.0.0.9"), 16384);
    freeReplyObject(r);
    assert_int_equal(m.nslots, 16384);
    int a = rcluster_map_owner(&m, 0), b = rcluster_map_owner(&m, 5461), c = rcluster_map_owner(&m, 16383);
    assert_string_equal(m.nodes[a].host, "127.0.0.1");
    assert_int_equal(m.nodes[a].port, 7000);
    assert_int_equal(rcluster_map_owner(&m, 5460), a);
    assert_int_equal(m.nodes[b].port, 7001);
    assert_int_equal(rcluster_map_owner(&m, 10922), b);
    /* an empty host means the node that was asked */
    assert_string_equal(m.nodes[c].host, "10.0.0.9");
    assert_int_equal(m.nodes[c].port, 7002);
    int ms[RCL_MAX_NODES];
    assert_int_equal(rcluster_map_masters(&m, ms), 3);
    assert_int_equal(rcluster_map_owner(&m, 16384), -1);

    /* a failover: slots 0..5460 now on the replica; old node indexes stay valid */
    redisReply *r2 = resp("*1\r\n*3\r\n:0\r\n:5460\r\n*2\r\n$9\r\n127.0.0.1\r\n:7004\r\n");
    assert_int_equal(rcluster_map_load(&m, r2, NULL), 5461);
    freeReplyObject(r2);
    int d = rcluster_map_owner(&m, 100);
    assert_int_equal(m.nodes[d].port, 7004);
    assert_int_equal(m.nodes[a].port, 7000);
    assert_int_equal(rcluster_map_owner(&m, 6000), -1);
    assert_int_equal(rcluster_map_masters(&m, ms), 1);
}

static void test_map_rejects(void **state)
{
    (void)state;
    rcluster_map_t m;
    rcluster_map_init(&m);
    redisReply *ok = resp(SLOTS_3);
    /* an empty host with nobody to stand for it is refused */
    assert_int_equal(rcluster_map_load(&m, ok, NULL), -1);
    assert_int_equal(rcluster_map_load(&m, ok, "127.0.0.1"), 16384);
    freeReplyObject(ok);
    static const char *const bad[] = {
        "-ERR This instance has cluster support disabled\r\n",
        "*1\r\n*3\r\n:0\r\n:16384\r\n*2\r\n$1\r\nh\r\n:1\r\n",    /* slot out of range */
        "*1\r\n*3\r\n:9\r\n:3\r\n*2\r\n$1\r\nh\r\n:1\r\n",        /* hi < lo */
        "*1\r\n*3\r\n:0\r\n:3\r\n*2\r\n$1\r\nh\r\n:0\r\n",        /* port 0 */
        "*1\r\n*3\r\n:0\r\n:3\r\n*2\r\n$1\r\nh\r\n:70000\r\n",    /* port too big */
        "*1\r\n*2\r\n:0\r\n:3\r\n",                              /* no node */
        "*1\r\n*3\r\n$1\r\n0\r\n:3\r\n*2\r\n$1\r\nh\r\n:1\r\n",   /* string slot */
        "*1\r\n*3\r\n:0\r\n:3\r\n*1\r\n$1\r\nh\r\n",              /* node without port */
        ":1\r\n",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        redisReply *r = resp(bad[i]);
        assert_int_equal(rcluster_map_load(&m, r, NULL), -1);
        freeReplyObject(r);
        /* unchanged */
        assert_int_equal(m.nslots, 16384);
        assert_int_equal(m.nodes[rcluster_map_owner(&m, 0)].port, 7000);
    }
    assert_int_equal(rcluster_map_load(&m, NULL, NULL), -1);
}

static void test_map_nodes(void **state)
{
    (void)state;
    rcluster_map_t m;
    rcluster_map_init(&m);
    assert_int_equal(rcluster_map_node(&m, "a", 1, 1), 0);
    assert_int_equal(rcluster_map_node(&m, "a", 1, 2), 1);
    assert_int_equal(rcluster_map_node(&m, "a", 1, 1), 0);
    assert_int_equal(rcluster_map_node(&m, "", 0, 1), -1);
    assert_int_equal(rcluster_map_node(&m, "a", 1, 0), -1);
    assert_int_equal(rcluster_map_node(&m, "a\0b", 3, 1), -1);
    for (int i = 2; i < RCL_MAX_NODES; i++)
        assert_int_equal(rcluster_map_node(&m, "h", 1, 1000 + i), i);
    assert_int_equal(rcluster_map_node(&m, "h", 1, 999), -1);   /* full */
}

static int perr(const char *s, unsigned *slot, char *host, int *port)
{
    return rcluster_parse_error(s, strlen(s), slot, host, RCL_HOST_MAX, port);
}

static void test_redirects(void **state)
{
    (void)state;
    unsigned slot = 0;
    char host[RCL_HOST_MAX];
    int port = 0;
    assert_int_equal(perr("MOVED 3999 127.0.0.1:6381", &slot, host, &port), RCL_ERR_MOVED);
    assert_int_equal(slot, 3999);
    assert_string_equal(host, "127.0.0.1");
    assert_int_equal(port, 6381);
    assert_int_equal(perr("ASK 16383 10.1.2.3:7000", &slot, host, &port), RCL_ERR_ASK);
    assert_int_equal(slot, 16383);
    assert_int_equal(port, 7000);
    assert_int_equal(perr("MOVED 1 :6380", &slot, host, &port), RCL_ERR_MOVED);
    assert_string_equal(host, "");
    assert_int_equal(perr("MOVED 2 ::1:6380", &slot, host, &port), RCL_ERR_MOVED);
    assert_string_equal(host, "::1");
    assert_int_equal(perr("TRYAGAIN Multiple keys request during rehashing of slot", &slot,
                          host, &port), RCL_ERR_TRYAGAIN);
    assert_int_equal(perr("CLUSTERDOWN The cluster is down", &slot, host, &port),
                     RCL_ERR_CLUSTERDOWN);
    static const char *const other[] = {
        "MOVED", "MOVED 16384 h:1", "MOVED x h:1", "MOVED 1 h", "MOVED 1 h:", "MOVED 1 h:0",
        "MOVED 1 h:65536", "MOVED 1 h:1x", "ASK 1", "MOVEDX 1 h:1", "ERR wrong", "NOSCRIPT",
        "TRYAGAINX", "",
    };
    for (size_t i = 0; i < sizeof other / sizeof other[0]; i++)
        assert_int_equal(perr(other[i], &slot, host, &port), RCL_ERR_OTHER);
    /* a host too long for the buffer is refused, not truncated */
    char small[4];
    assert_int_equal(rcluster_parse_error("MOVED 1 abcdef:1", 16, &slot, small, sizeof small, &port),
                     RCL_ERR_OTHER);
}

static int kidx(int argc, const char **argv)
{
    return rcluster_key_index(argc, argv, NULL);
}

static void test_key_index(void **state)
{
    (void)state;
    const char *get[] = { "GET", "k" };
    assert_int_equal(kidx(2, get), 1);
    const char *hset[] = { "hset", "k", "f", "v" };
    assert_int_equal(kidx(4, hset), 1);
    const char *xg[] = { "XGROUP", "CREATE", "s", "g1", "0", "MKSTREAM" };
    assert_int_equal(kidx(6, xg), 2);
    const char *xi[] = { "XINFO", "GROUPS", "s" };
    assert_int_equal(kidx(3, xi), 2);
    const char *ev[] = { "EVALSHA", "abc", "3", "k1", "k2", "k3", "a" };
    assert_int_equal(kidx(7, ev), 3);
    const char *ev0[] = { "EVAL", "return 1", "0" };
    assert_int_equal(kidx(3, ev0), -1);
    const char *xr[] = { "XREADGROUP", "GROUP", "g1", "c", "COUNT", "1", "streams", "s", ">" };
    assert_int_equal(kidx(9, xr), 7);
    const char *ping[] = { "PING" };
    assert_int_equal(kidx(1, ping), -1);
    const char *info[] = { "INFO", "server" };
    assert_int_equal(kidx(2, info), -1);
    const char *sl[] = { "SCRIPT", "LOAD", "x" };
    assert_int_equal(kidx(3, sl), -1);
    const char *sp[] = { "SPUBLISH", "ch", "m" };
    assert_int_equal(kidx(3, sp), 1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_crc16_and_slots),
        cmocka_unit_test(test_hash_tags),
        cmocka_unit_test(test_map_load),
        cmocka_unit_test(test_map_rejects),
        cmocka_unit_test(test_map_nodes),
        cmocka_unit_test(test_redirects),
        cmocka_unit_test(test_key_index),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

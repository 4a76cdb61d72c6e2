/* rcluster.c -- Redis Cluster arithmetic: hash slots, the slot map, redirects (rcluster.h).
 *
 * Written from the cluster specification: CRC16 is the XMODEM variant (polynomial
 * 0x1021, initial value 0, no reflection), the hash tag is the part between the first
 * '{' and the first '}' after it, used only when non-empty. */
#include "redis/rcluster.h"

#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <hiredis/hiredis.h>

/* ---------------------------------------------------------------- slots */

static uint16_t crc_tab[256];
static int crc_tab_ready;

/* The table is a pure function of the polynomial; building it twice from two threads
 * writes the same bytes, so no lock is needed (the flag is only an optimisation). */
static void crc_tab_build(void)
{
    for (unsigned i = 0; i < 256; i++) {
        uint16_t c = (uint16_t)(i << 8);
        for (int b = 0; b < 8; b++)
            c = (c & 0x8000) ? (uint16_t)((c << 1) ^ 0x1021) : (uint16_t)(c << 1);
        crc_tab[i] = c;
    }
    __atomic_store_n(&crc_tab_ready, 1, __ATOMIC_RELEASE);
}

uint16_t rcluster_crc16(const char *buf, size_t len)
{
    if (!__atomic_load_n(&crc_tab_ready, __ATOMIC_ACQUIRE))
        crc_tab_build();
    uint16_t crc = 0;
    for (size_t i = 0; i < len; i++)
        crc = (uint16_t)((crc << 8) ^ crc_tab[((crc >> 8) ^ (unsigned char)buf[i]) & 0xff]);
    return crc;
}

unsigned rcluster_slot(const char *key, size_t len)
{
    const char *open = memchr(key, '{', len);
    if (open) {
        size_t rest = len - (size_t)(open - key) - 1;
        const char *close = memchr(open + 1, '}', rest);
        if (close && close > open + 1)
            return rcluster_crc16(open + 1, (size_t)(close - open - 1)) & (RCL_SLOTS - 1);
    }
    return rcluster_crc16(key, len) & (RCL_SLOTS - 1);
}

/* ---------------------------------------------------------------- the map */

void rcluster_map_init(rcluster_map_t *m)
{
    memset(m, 0, sizeof *m);
    for (int i = 0; i < RCL_SLOTS; i++)
        m->slot_node[i] = RCL_NO_NODE;
}

int rcluster_map_node(rcluster_map_t *m, const char *host, size_t hostlen, int port)
{
    if (hostlen == 0 || hostlen >= RCL_HOST_MAX || memchr(host, '\0', hostlen) ||
        port <= 0 || port > 65535)
        return -1;
    for (int i = 0; i < m->nnodes; i++)
        if (m->nodes[i].port == port && strlen(m->nodes[i].host) == hostlen &&
            memcmp(m->nodes[i].host, host, hostlen) == 0)
            return i;
    if (m->nnodes >= RCL_MAX_NODES)
        return -1;
    rcluster_node_t *n = &m->nodes[m->nnodes];
    memcpy(n->host, host, hostlen);
    n->host[hostlen] = '\0';
    n->port = port;
    return m->nnodes++;
}

static int is_str(const redisReply *r)
{
    return r && (r->type == REDIS_REPLY_STRING || r->type == REDIS_REPLY_STATUS);
}

int rcluster_map_load(rcluster_map_t *m, const redisReply *r, const char *asked_host)
{
    if (r == NULL || r->type != REDIS_REPLY_ARRAY)
        return -1;
    /* Validate everything before touching the map: a half-applied reply would be worse
     * than the old map. */
    for (size_t i = 0; i < r->elements; i++) {
        const redisReply *e = r->element[i];
        if (e->type != REDIS_REPLY_ARRAY || e->elements < 3 ||
            e->element[0]->type != REDIS_REPLY_INTEGER ||
            e->element[1]->type != REDIS_REPLY_INTEGER)
            return -1;
        long long lo = e->element[0]->integer, hi = e->element[1]->integer;
        if (lo < 0 || hi < lo || hi >= RCL_SLOTS)
            return -1;
        const redisReply *n = e->element[2];
        if (n->type != REDIS_REPLY_ARRAY || n->elements < 2 || !is_str(n->element[0]) ||
            n->element[1]->type != REDIS_REPLY_INTEGER || n->element[1]->integer <= 0 ||
            n->element[1]->integer > 65535)
            return -1;
    }
    uint16_t owner[RCL_SLOTS];
    for (int i = 0; i < RCL_SLOTS; i++)
        owner[i] = RCL_NO_NODE;
    rcluster_map_t next = *m;
    int covered = 0;
    for (size_t i = 0; i < r->elements; i++) {
        const redisReply *e = r->element[i];
        const redisReply *n = e->element[2];
        const char *host = n->element[0]->str;
        size_t hlen = n->element[0]->len;
        if ((hlen == 0 || (hlen == 1 && host[0] == '?')) && asked_host) {
            host = asked_host;
            hlen = strlen(asked_host);
        }
        int idx = rcluster_map_node(&next, host, hlen, (int)n->element[1]->integer);
        if (idx < 0)
            return -1;
        for (long long s = e->element[0]->integer; s <= e->element[1]->integer; s++) {
            if (owner[s] == RCL_NO_NODE)
                covered++;
            owner[s] = (uint16_t)idx;
        }
    }
    memcpy(next.slot_node, owner, sizeof owner);
    next.nslots = covered;
    *m = next;
    return covered;
}

int rcluster_map_owner(const rcluster_map_t *m, unsigned slot)
{
    if (slot >= RCL_SLOTS || m->slot_node[slot] == RCL_NO_NODE)
        return -1;
    return m->slot_node[slot];
}

int rcluster_map_masters(const rcluster_map_t *m, int *out)
{
    unsigned char seen[RCL_MAX_NODES] = { 0 };
    for (int s = 0; s < RCL_SLOTS; s++)
        if (m->slot_node[s] != RCL_NO_NODE && m->slot_node[s] < RCL_MAX_NODES)
            seen[m->slot_node[s]] = 1;
    int n = 0;
    for (int i = 0; i < RCL_MAX_NODES; i++)
        if (seen[i])
            out[n++] = i;
    return n;
}

/* ---------------------------------------------------------------- redirects */

static int prefix(const char *s, size_t len, const char *p)
{
    size_t n = strlen(p);
    return len >= n && memcmp(s, p, n) == 0 && (len == n || s[n] == ' ');
}

/* "<slot> <host>:<port>"; the host may be empty or a bracket-less IPv6 address, so the
 * port follows the LAST ':'. */
static int parse_target(const char *s, size_t len, unsigned *slot, char *host, size_t hostcap,
                        int *port)
{
    size_t i = 0;
    unsigned long v = 0;
    if (i >= len || s[i] < '0' || s[i] > '9')
        return -1;
    while (i < len && s[i] >= '0' && s[i] <= '9') {
        v = v * 10 + (unsigned long)(s[i] - '0');
        if (v >= RCL_SLOTS)
            return -1;
        i++;
    }
    if (i >= len || s[i] != ' ')
        return -1;
    i++;
    const char *hp = s + i;
    size_t hplen = len - i;
    const char *colon = NULL;
    for (size_t k = 0; k < hplen; k++)
        if (hp[k] == ':')
            colon = hp + k;
    if (colon == NULL)
        return -1;
    size_t hlen = (size_t)(colon - hp);
    if (hlen >= hostcap || memchr(hp, ' ', hlen) || memchr(hp, '\0', hlen))
        return -1;
    const char *ps = colon + 1;
    size_t plen = hplen - hlen - 1;
    if (plen == 0 || plen > 5)
        return -1;
    int p = 0;
    for (size_t k = 0; k < plen; k++) {
        if (ps[k] < '0' || ps[k] > '9')
            return -1;
        p = p * 10 + (ps[k] - '0');
    }
    if (p <= 0 || p > 65535)
        return -1;
    memcpy(host, hp, hlen);
    host[hlen] = '\0';
    *slot = (unsigned)v;
    *port = p;
    return 0;
}

int rcluster_parse_error(const char *s, size_t len, unsigned *slot, char *host, size_t hostcap,
                    int *port)
{
    if (s == NULL)
        return RCL_ERR_OTHER;
    if (prefix(s, len, "MOVED") || prefix(s, len, "ASK")) {
        int moved = s[0] == 'M';
        size_t skip = moved ? 6 : 4;
        if (len <= skip || host == NULL || hostcap == 0 ||
            parse_target(s + skip, len - skip, slot, host, hostcap, port) < 0)
            return RCL_ERR_OTHER;
        return moved ? RCL_ERR_MOVED : RCL_ERR_ASK;
    }
    if (prefix(s, len, "TRYAGAIN"))
        return RCL_ERR_TRYAGAIN;
    if (prefix(s, len, "CLUSTERDOWN"))
        return RCL_ERR_CLUSTERDOWN;
    return RCL_ERR_OTHER;
}

/* ---------------------------------------------------------------- keys */

static int arg_is(const char *a, size_t alen, const char *name)
{
    size_t n = strlen(name);
    return alen == n && strncasecmp(a, name, n) == 0;
}

int rcluster_key_index(int argc, const char **argv, const size_t *argvlen)
{
    if (argc < 2)
        return -1;
    const char *c = argv[0];
    size_t cl = argvlen ? argvlen[0] : strlen(c);
    static const char *const keyless[] = {
        "PING", "INFO", "SCRIPT", "CLUSTER", "TIME", "ASKING", "READONLY", "WAIT", "AUTH",
        "SELECT", "FUNCTION", "CLIENT", "CONFIG", "DBSIZE", "KEYS", "SCAN", "FLUSHALL",
        "FLUSHDB", "MULTI", "EXEC", "DISCARD", "PUBLISH", "ECHO", "HELLO", "COMMAND", NULL
    };
    for (int i = 0; keyless[i]; i++)
        if (arg_is(c, cl, keyless[i]))
            return -1;
    if (arg_is(c, cl, "XGROUP") || arg_is(c, cl, "XINFO"))
        return argc > 2 ? 2 : -1;
    if (arg_is(c, cl, "EVAL") || arg_is(c, cl, "EVALSHA") || arg_is(c, cl, "EVAL_RO") ||
        arg_is(c, cl, "EVALSHA_RO") || arg_is(c, cl, "FCALL") || arg_is(c, cl, "FCALL_RO")) {
        if (argc < 4)
            return -1;
        size_t nl = argvlen ? argvlen[2] : strlen(argv[2]);
        if (nl == 0 || (nl == 1 && argv[2][0] == '0'))
            return -1;
        return 3;
    }
    if (arg_is(c, cl, "XREADGROUP") || arg_is(c, cl, "XREAD")) {
        for (int i = 1; i + 1 < argc; i++)
            if (arg_is(argv[i], argvlen ? argvlen[i] : strlen(argv[i]), "STREAMS"))
                return i + 1;
        return -1;
    }
    return 1;
}

/* connlimit.c -- connections and buffered bytes per client address (see connlimit.h).
 *
 * Chained hash table, an entry per key with at least one open connection (IPv4 addresses,
 * IPv6 /64s, and for the /48 caps IPv6 /48s); the entry is freed when its last connection
 * closes, so the table holds at most two entries per open connection. */
#include "http/connlimit.h"
#include "core/xmem.h"

#include <netinet/in.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

enum { NBUCKETS = 4096 };      /* a power of two */

struct connlimit_entry {
    struct connlimit_entry *next;
    connlimit_key_t key;
    int n;
    _Atomic size_t bytes;      /* request bytes held by the key's connections */
};
typedef struct connlimit_entry entry_t;

struct connlimit {
    pthread_mutex_t mu;
    int per_ip;
    entry_t *buckets[NBUCKETS];
};

connlimit_t *connlimit_new(int per_ip)
{
    connlimit_t *cl = xcalloc(1, sizeof *cl);
    pthread_mutex_init(&cl->mu, NULL);
    cl->per_ip = per_ip;
    return cl;
}

void connlimit_free(connlimit_t *cl)
{
    if (!cl)
        return;
    for (int i = 0; i < NBUCKETS; i++) {
        for (entry_t *e = cl->buckets[i], *next; e; e = next) {
            next = e->next;
            free(e);
        }
    }
    pthread_mutex_destroy(&cl->mu);
    free(cl);
}

void connlimit_key(const struct sockaddr_storage *ss, connlimit_key_t *key)
{
    memset(key, 0, sizeof *key);
    if (ss->ss_family == AF_INET) {
        memcpy(key->b, &((const struct sockaddr_in *)ss)->sin_addr, 4);
        key->len = 4;
    } else if (ss->ss_family == AF_INET6) {
        const struct in6_addr *a = &((const struct sockaddr_in6 *)ss)->sin6_addr;
        if (IN6_IS_ADDR_V4MAPPED(a)) {
            memcpy(key->b, a->s6_addr + 12, 4);
            key->len = 4;
        } else {
            memcpy(key->b, a->s6_addr, 8);     /* the /64 */
            key->len = 8;
        }
    }
}

static entry_t **slot(connlimit_t *cl, const connlimit_key_t *key)
{
    uint32_t h = 2166136261u;  /* FNV-1a */
    for (int i = 0; i < key->len; i++)
        h = (h ^ key->b[i]) * 16777619u;
    h = (h ^ key->len) * 16777619u;
    entry_t **pp = &cl->buckets[h & (NBUCKETS - 1)];
    while (*pp && ((*pp)->key.len != key->len || memcmp((*pp)->key.b, key->b, key->len) != 0))
        pp = &(*pp)->next;
    return pp;
}

/* The /48 of an IPv6 /64 key (len 6: no other key has that length). */
static connlimit_key_t site_of(const connlimit_key_t *key)
{
    connlimit_key_t s;
    memset(&s, 0, sizeof s);
    memcpy(s.b, key->b, 6);
    s.len = 6;
    return s;
}

/* One more connection on key's entry (created at 1). Call under cl->mu after checking
 * the cap. */
static entry_t *count(entry_t **pp, const connlimit_key_t *key)
{
    if (*pp) {
        (*pp)->n++;
        return *pp;
    }
    /* Bounded before we get here: one entry per key holding a connection, and the
     * connections are capped. */
    entry_t *e = xcalloc(1, sizeof *e);
    e->key = *key;
    e->n = 1;
    *pp = e;
    return e;
}

static void uncount(connlimit_t *cl, const connlimit_key_t *key)
{
    entry_t **pp = slot(cl, key);
    entry_t *e = *pp;
    if (e && --e->n <= 0) {
        *pp = e->next;
        free(e);
    }
}

int connlimit_acquire(connlimit_t *cl, const connlimit_key_t *key, connlimit_entry_t **entry)
{
    if (entry)
        *entry = NULL;
    if (!cl || key->len == 0)
        return 0;
    int rc = -1;
    pthread_mutex_lock(&cl->mu);
    entry_t **pp = slot(cl, key);
    if (!*pp || (*pp)->n < cl->per_ip) {
        if (key->len == 8) {
            connlimit_key_t site = site_of(key);
            entry_t **sp = slot(cl, &site);
            if (!*sp || (*sp)->n < cl->per_ip * CONNLIMIT_V6_48_FACTOR) {
                count(sp, &site);
                rc = 0;
            }
        } else {
            rc = 0;
        }
        if (rc == 0) {
            pp = slot(cl, key);   /* the /48's insertion may have moved the chain's head */
            entry_t *e = count(pp, key);
            if (entry)
                *entry = e;
        }
    }
    pthread_mutex_unlock(&cl->mu);
    return rc;
}

void connlimit_release(connlimit_t *cl, const connlimit_key_t *key)
{
    if (!cl || key->len == 0)
        return;
    pthread_mutex_lock(&cl->mu);
    uncount(cl, key);
    if (key->len == 8) {
        connlimit_key_t site = site_of(key);
        uncount(cl, &site);
    }
    pthread_mutex_unlock(&cl->mu);
}

int connlimit_charge(connlimit_entry_t *e, size_t n, size_t cap)
{
    if (!e)
        return 0;
    size_t was = atomic_fetch_add_explicit(&e->bytes, n, memory_order_relaxed);
    if (was + n > cap) {
        atomic_fetch_sub_explicit(&e->bytes, n, memory_order_relaxed);
        return -1;
    }
    return 0;
}

void connlimit_uncharge(connlimit_entry_t *e, size_t n)
{
    if (e && n)
        atomic_fetch_sub_explicit(&e->bytes, n, memory_order_relaxed);
}

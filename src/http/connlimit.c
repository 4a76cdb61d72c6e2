/* connlimit.c -- connections per client address (see connlimit.h).
 *
 * Chained hash table, an entry per address with at least one open connection; the entry
 * is freed when its last connection closes, so the table holds no more entries than
 * there are open connections. */
#include "http/connlimit.h"
#include "core/xmem.h"

#include <netinet/in.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

enum { NBUCKETS = 4096 };      /* a power of two */

typedef struct entry {
    struct entry *next;
    connlimit_key_t key;
    int n;
} entry_t;

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
            memcpy(key->b, a->s6_addr, 16);
            key->len = 16;
        }
    }
}

static entry_t **slot(connlimit_t *cl, const connlimit_key_t *key)
{
    uint32_t h = 2166136261u;  /* FNV-1a */
    for (int i = 0; i < key->len; i++)
        h = (h ^ key->b[i]) * 16777619u;
    entry_t **pp = &cl->buckets[h & (NBUCKETS - 1)];
    while (*pp && ((*pp)->key.len != key->len || memcmp((*pp)->key.b, key->b, key->len) != 0))
        pp = &(*pp)->next;
    return pp;
}

int connlimit_acquire(connlimit_t *cl, const connlimit_key_t *key)
{
    if (!cl || key->len == 0)
        return 0;
    int rc = 0;
    pthread_mutex_lock(&cl->mu);
    entry_t **pp = slot(cl, key);
    if (*pp) {
        if ((*pp)->n >= cl->per_ip)
            rc = -1;
        else
            (*pp)->n++;
    } else {
        /* Bounded before we get here: one entry per IP holding a connection, and the
         * connections are capped. */
        entry_t *e = xcalloc(1, sizeof *e);
        e->key = *key;
        e->n = 1;
        *pp = e;
    }
    pthread_mutex_unlock(&cl->mu);
    return rc;
}

void connlimit_release(connlimit_t *cl, const connlimit_key_t *key)
{
    if (!cl || key->len == 0)
        return;
    pthread_mutex_lock(&cl->mu);
    entry_t **pp = slot(cl, key);
    entry_t *e = *pp;
    if (e && --e->n <= 0) {
        *pp = e->next;
        free(e);
    }
    pthread_mutex_unlock(&cl->mu);
}

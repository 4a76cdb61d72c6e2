/* guard.c -- per-key guessing budgets that can be looked at without being charged
 * (guard.h). */
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include "auth/guard.h"
#include "core/xmem.h"

#define WAYS 8u

typedef struct gent {
    uint64_t key;
    uint64_t at_ms;             /* when tokens was last brought up to date */
    double tokens;
    int used;
} gent_t;

struct guard {
    gent_t *e;
    unsigned nsets;
    uint64_t seed;
    double per_ms, burst, per_s;
};

guard_t *guard_new(double per_s, double burst, unsigned entries)
{
    if (!(per_s > 0)) {
        return NULL;
    }
    guard_t *g = xcalloc(1, sizeof(*g));
    g->nsets = entries / WAYS + 1;
    g->e = xcalloc((size_t)g->nsets * WAYS, sizeof(gent_t));
    g->per_s = per_s;
    g->per_ms = per_s / 1000.0;
    g->burst = burst >= 1 ? burst : 1;
    if (getrandom(&g->seed, sizeof g->seed, 0) != (ssize_t)sizeof g->seed) {
        g->seed = (uint64_t)(uintptr_t)g * UINT64_C(0x9e3779b97f4a7c15);
    }
    return g;
}

void guard_free(guard_t *g)
{
    if (g != NULL) {
        free(g->e);
        free(g);
    }
}

static double level(const guard_t *g, const gent_t *e, uint64_t now_ms)
{
    double t = e->tokens;
    if (now_ms > e->at_ms) {
        t += (double)(now_ms - e->at_ms) * g->per_ms;
    }
    return t < g->burst ? t : g->burst;
}

/* key's entry; or, when create, a free one or one refilled to the burst (forgetting it
 * changes nothing), reset to a full bucket; NULL when the set has neither. */
static gent_t *find(guard_t *g, uint64_t key, uint64_t now_ms, int create)
{
    uint64_t h = (key ^ g->seed) * UINT64_C(0xbf58476d1ce4e5b9);
    gent_t *set = &g->e[(size_t)((h ^ (h >> 31)) % g->nsets) * WAYS];
    gent_t *spare = NULL;
    for (unsigned i = 0; i < WAYS; i++) {
        gent_t *e = &set[i];
        if (e->used && e->key == key) {
            return e;
        }
        if (spare == NULL && (!e->used || level(g, e, now_ms) >= g->burst)) {
            spare = e;
        }
    }
    if (spare != NULL && create) {
        spare->used = 1;
        spare->key = key;
        spare->tokens = g->burst;
        spare->at_ms = now_ms;
    }
    return spare != NULL && create ? spare : NULL;
}

int guard_ok(guard_t *g, uint64_t key, uint64_t now_ms)
{
    if (g == NULL) {
        return 1;
    }
    gent_t *e = find(g, key, now_ms, 0);
    if (e != NULL) {
        return level(g, e, now_ms) >= 1.0;
    }
    /* Unknown: allowed when it could get a bucket (closed when its set is all in use). */
    return find(g, key, now_ms, 1) != NULL;
}

void guard_charge(guard_t *g, uint64_t key, uint64_t now_ms)
{
    if (g == NULL) {
        return;
    }
    gent_t *e = find(g, key, now_ms, 1);
    if (e == NULL) {
        return;   /* its set is full of spent buckets: it is refused anyway */
    }
    double t = level(g, e, now_ms) - 1.0;
    e->tokens = t > 0 ? t : 0;
    e->at_ms = now_ms > e->at_ms ? now_ms : e->at_ms;
}

int guard_retry_s(const guard_t *g)
{
    if (g == NULL) {
        return 1;
    }
    double s = 1.0 / g->per_s;
    return s < 1 ? 1 : s > 86400 ? 86400 : (int)(s + 0.999);
}

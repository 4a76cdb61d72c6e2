/* vcache.c -- a small cache keyed by voucher id, with expiry (vcache.h). */
#include "sale/vcache.h"

#include <stdlib.h>
#include <string.h>

#include "core/xmem.h"

typedef struct ent {
    int64_t voucher_id;   /* 0 = unused */
    uint64_t until_ms;
} ent_t;                  /* followed by the payload, stride bytes in all */

struct vcache {
    unsigned slots;
    size_t stride;
    unsigned char *mem;
};

vcache_t *vcache_new(unsigned slots, size_t size)
{
    vcache_t *c = xcalloc(1, sizeof(*c));
    c->slots = slots < VCACHE_WAYS ? VCACHE_WAYS : slots;
    c->stride = (sizeof(ent_t) + size + 15u) & ~(size_t)15u;
    c->mem = xcalloc(c->slots, c->stride);
    return c;
}

void vcache_free(vcache_t *c)
{
    if (c == NULL)
        return;
    free(c->mem);
    free(c);
}

static ent_t *at(const vcache_t *c, unsigned i)
{
    return (ent_t *)(void *)(c->mem + (size_t)i * c->stride);
}

/* The first of the voucher's set of VCACHE_WAYS entries. */
static unsigned set_of(const vcache_t *c, int64_t voucher_id)
{
    uint64_t h = (uint64_t)voucher_id * UINT64_C(0x9e3779b97f4a7c15);
    h ^= h >> 29;
    return (unsigned)(h & (c->slots - 1)) & ~(VCACHE_WAYS - 1);
}

void *vcache_get(vcache_t *c, int64_t voucher_id, uint64_t now_ms)
{
    unsigned s = set_of(c, voucher_id);
    for (unsigned i = 0; i < VCACHE_WAYS; i++) {
        ent_t *e = at(c, s + i);
        if (e->voucher_id == voucher_id)
            return now_ms < e->until_ms ? (void *)(e + 1) : NULL;
    }
    return NULL;
}

void *vcache_find(vcache_t *c, int64_t voucher_id)
{
    unsigned s = set_of(c, voucher_id);
    for (unsigned i = 0; i < VCACHE_WAYS; i++) {
        ent_t *e = at(c, s + i);
        if (e->voucher_id == voucher_id)
            return e + 1;
    }
    return NULL;
}

void *vcache_put(vcache_t *c, int64_t voucher_id, uint64_t until_ms)
{
    unsigned s = set_of(c, voucher_id);
    ent_t *pick = at(c, s);
    for (unsigned i = 0; i < VCACHE_WAYS; i++) {
        ent_t *e = at(c, s + i);
        if (e->voucher_id == voucher_id) {
            e->until_ms = until_ms;
            return e + 1;
        }
        if (e->until_ms < pick->until_ms)
            pick = e;   /* the one expiring first */
    }
    memset(pick + 1, 0, c->stride - sizeof(ent_t));
    pick->voucher_id = voucher_id;
    pick->until_ms = until_ms;
    return pick + 1;
}

void vcache_drop(vcache_t *c, int64_t voucher_id)
{
    unsigned s = set_of(c, voucher_id);
    for (unsigned i = 0; i < VCACHE_WAYS; i++) {
        ent_t *e = at(c, s + i);
        if (e->voucher_id == voucher_id) {
            e->voucher_id = 0;
            e->until_ms = 0;
        }
    }
}

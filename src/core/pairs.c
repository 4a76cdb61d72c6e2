/* pairs.c -- a growable array of (int64, int64) pairs (pairs.h). */
#include "core/pairs.h"

#include <stdlib.h>
#include <string.h>

#include "core/xmem.h"

void pairs_push(pairs_t *p, int64_t a, int64_t b)
{
    if (p->n == p->cap) {
        p->cap = p->cap ? p->cap * 2 : 1024;
        p->v = xrealloc(p->v, p->cap * sizeof *p->v);
    }
    p->v[p->n].a = a;
    p->v[p->n].b = b;
    p->n++;
}

void pairs_free(pairs_t *p)
{
    free(p->v);
    memset(p, 0, sizeof *p);
}

static int cmp_ab(const void *x, const void *y)
{
    const pair_t *p = x, *q = y;
    if (p->a != q->a)
        return p->a < q->a ? -1 : 1;
    if (p->b != q->b)
        return p->b < q->b ? -1 : 1;
    return 0;
}

void pairs_sort(pairs_t *p)
{
    if (p->n > 1)
        qsort(p->v, p->n, sizeof *p->v, cmp_ab);
}

ssize_t pairs_find(const pairs_t *p, int64_t key)
{
    size_t lo = 0, hi = p->n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (p->v[mid].a < key)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < p->n && p->v[lo].a == key ? (ssize_t)lo : -1;
}

int64_t pairs_dups(const pairs_t *p, int64_t *example)
{
    int64_t n = 0;
    for (size_t i = 1; i < p->n; i++)
        if (p->v[i].a == p->v[i - 1].a && (i < 2 || p->v[i - 2].a != p->v[i].a)) {
            if (n == 0 && example)
                *example = p->v[i].a;
            n++;
        }
    return n;
}

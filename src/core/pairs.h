/* pairs.h -- a growable array of (int64, int64) pairs, sorted and searched by the first.
 *
 * For comparing large sets of (user id, order id) without hash tables: a million pairs
 * cost 16 MB and one sort. Used by the Redis rebuild (rebuild.c) and the audit tool.
 * The caller owns the array (pairs_free); it grows through xmem.h. */
#ifndef SECKILL_PAIRS_H
#define SECKILL_PAIRS_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

typedef struct pair {
    int64_t a, b;
} pair_t;

typedef struct pairs {
    pair_t *v;
    size_t n, cap;
} pairs_t;

void pairs_push(pairs_t *p, int64_t a, int64_t b);
void pairs_free(pairs_t *p);   /* leaves an empty array */

/* Sorts by a, then b. */
void pairs_sort(pairs_t *p);

/* In a sorted array: the index of the first pair with .a == key, or -1. */
ssize_t pairs_find(const pairs_t *p, int64_t key);

/* In a sorted array: how many keys (.a) occur more than once; the first in *example. */
int64_t pairs_dups(const pairs_t *p, int64_t *example);

#endif

/* vcache.h -- a small cache keyed by voucher id, each entry with an expiry.
 *
 * Set-associative and fixed in size: `slots` entries in sets of VCACHE_WAYS, a voucher's
 * set picked by a multiplicative hash of its id; a full set gives up the entry that
 * expires first (an unused one has expiry 0). Nothing is allocated after vcache_new, so
 * a lookup on the hot path costs a hash and at most VCACHE_WAYS compares. An entry is
 * the caller's payload of `size` bytes; the cache never looks inside it.
 *
 * Used by what a worker knows of a voucher (admission.c: its sold-out verdict, its K) and
 * the stock-bucket routes (buckets.c).
 * Ownership: one thread (the worker that made it); the caller frees it. */
#ifndef SECKILL_VCACHE_H
#define SECKILL_VCACHE_H

#include <stddef.h>
#include <stdint.h>

#define VCACHE_WAYS 4u

typedef struct vcache vcache_t;

/* slots: a power of two, at least VCACHE_WAYS. Aborts on out of memory (xmem.h). */
vcache_t *vcache_new(unsigned slots, size_t size);
void vcache_free(vcache_t *c);   /* NULL is fine */

/* The payload of voucher_id's entry, or NULL when there is none or it expired (now_ms >=
 * its expiry; times are the caller's clock, e.g. clock_mono_ms()). */
void *vcache_get(vcache_t *c, int64_t voucher_id, uint64_t now_ms);

/* The payload of voucher_id's entry whether or not it expired (an expired entry stays
 * until its slot is given to another voucher), or NULL. For what outlives the expiry. */
void *vcache_find(vcache_t *c, int64_t voucher_id);

/* The payload to fill for voucher_id, valid until until_ms: its entry (the payload as it
 * was), or the one it replaces (the payload zeroed). */
void *vcache_put(vcache_t *c, int64_t voucher_id, uint64_t until_ms);

/* Forgets voucher_id's entry, if any. */
void vcache_drop(vcache_t *c, int64_t voucher_id);

#endif

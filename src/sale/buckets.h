/* buckets.h -- stock buckets: one hot voucher's stock split over K hash tags (the
 * workers' side: routing, transfers between buckets).
 *
 * A voucher created with stockBuckets = K > 1 keeps its stock in K buckets, each a
 * complete copy of the admission keys under its own hash tag (keys.h: bucket 0 is the
 * voucher's own {id}, bucket b >= 1 is {id.b<b>.<salt>}, placed a b/K turn of the slot
 * ring away, so on a cluster the buckets sit on different masters). K = 1 is exactly an
 * unbucketed voucher.
 *
 *   home      a buyer always buys in bucket buckets_home(user, K) (a hash of the user
 *             id), so one-per-user stays the single-slot check admit.lua does there;
 *   K         is field `buckets` of every bucket's voucher hash, written before its
 *             stock (publish.h); an absent field is K = 1. A worker routes a voucher
 *             whose K it does not know as unbucketed, and that call asks admit.lua to
 *             check the K against the field: a mismatch decides nothing and answers the
 *             voucher's K, which the worker keeps (buckets_learn) and routes by from
 *             then on; codes mean K = 1, which the worker keeps too (admission.c). So an
 *             unbucketed voucher's admissions never come here and ask the check once
 *             per worker, and a bucketed voucher costs one bounced call per worker;
 *   refill    when a buyer's home bucket answers sold out, the worker moves stock into
 *             it from the other buckets (buckets_refill: a transfer, src/sale/transfer.lua),
 *             and the buyer tries again at home. Only when every other bucket was seen
 *             empty with no transfer in flight is the buyer told 库存不足.
 *
 * A transfer: `take` on the donor removes units and logs them under a fresh transfer id
 * in the donor's slot; `apply` on the receiver adds them once (the id goes into the
 * receiver's applied set in the same script); then the donor's log entry is deleted. A
 * crash anywhere leaves the units either in the donor's stock, in its log (to be applied
 * by the sweep, bucket_sweep.h; a replay of apply is a no-op), or in the receiver's stock.
 *
 * Everything here runs on one worker's loop; the cache belongs to that worker's
 * admission cache (admission.c creates and frees it). */
#ifndef SECKILL_BUCKETS_H
#define SECKILL_BUCKETS_H

#include <stddef.h>
#include <stdint.h>

#include "core/key.h"

#define BUCKETS_MAX KEY_BUCKETS_MAX

struct worker;
typedef struct buckets_cache buckets_cache_t;

/* Where a voucher's buckets are: k = 1 unbucketed; salt[b] for key_btag_salt. */
typedef struct buckets_route {
    int k;
    uint16_t salt[BUCKETS_MAX];
} buckets_route_t;

buckets_cache_t *buckets_cache_new(void);
void buckets_cache_free(buckets_cache_t *bc);

/* The route of a voucher with k buckets (the salts computed: key_bsalt). */
void buckets_route_fill(buckets_route_t *rt, int64_t voucher_id, int k);

/* The route this worker learned for a bucketed voucher, or NULL (none learned: route it
 * as unbucketed). A voucher's K never changes while its keys live, so a route is kept
 * until forgotten or pushed out by other vouchers' (then learned again). */
const buckets_route_t *buckets_route(buckets_cache_t *bc, int64_t voucher_id);

/* admit.lua answered the voucher's K: k >= 2 kept as its route, anything else forgotten. */
void buckets_learn(buckets_cache_t *bc, int64_t voucher_id, int k);
void buckets_forget(buckets_cache_t *bc, int64_t voucher_id);

/* The buyer's home bucket, 0..k-1 (0 when k <= 1). */
int buckets_home(int64_t user_id, int k);
/* Bucket b's share of stock split over k buckets. */
int64_t buckets_share(int64_t stock, int b, int k);

/* The admission keys of bucket b (voucher hash, buyers, stream) into 64-byte buffers;
 * lens as the key_* functions return them. 0, or -1 if one did not fit. */
int buckets_keys(int64_t voucher_id, int b, unsigned salt, char *kv, char *kb, char *ks, int *lv,
                 int *lb, int *ls);

/* Moves stock into bucket home from another bucket of the voucher. done(priv, rc): rc > 0
 * units were moved into home; 0 every other bucket was seen empty and no transfer was in
 * flight from it; BUCKETS_IN_FLIGHT every other bucket was empty but one had a transfer in
 * flight (its units are landing somewhere: look again); -1 could not tell (Redis failed
 * or answered late). want: units wanted (the buyers waiting). Refills of one (voucher,
 * home) on a worker are coalesced: later callers join the one in flight. */
#define BUCKETS_IN_FLIGHT (-2)
void buckets_refill(struct worker *w, buckets_cache_t *bc, int64_t voucher_id,
                    const buckets_route_t *rt, int home, int want,
                    void (*done)(void *priv, int64_t rc), void *priv);

#endif

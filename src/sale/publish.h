/* publish.h -- making a flash-sale voucher sellable in Redis: every one of its stock
 * buckets (K = 1: the voucher's own keys; buckets.h has the layout).
 *
 * Each bucket gets its stream with consumer group g1 (XGROUP CREATE MKSTREAM; BUSYGROUP
 * is fine), its member in seckill:streams (the writers read the streams listed there),
 * its hash's begin, end, -- bucketed -- `buckets` = K and -- with a waiting room, bucket 0
 * -- room_r, room_ttl, room_gate (src/room/room.h), then its share of the stock,
 * HSETNX: a rebuild from SQL (rebuild.h) that got there first is kept. Stock is what
 * makes a bucket sellable, so it goes last; and buckets 1..K-1 are all answered before
 * bucket 0 -- the voucher's own keys, whose stock makes the voucher sellable -- is sent.
 * The worker's cached verdict for the voucher (admission.h) and its room flag are dropped. */
#ifndef SECKILL_PUBLISH_H
#define SECKILL_PUBLISH_H

#include <stdint.h>

struct http_req;
struct store_room;

/* done(r, ok) runs once, after the last reply (ok: every command succeeded). room: the
 * voucher's waiting room (NULL or admit_per_s 0: none), written with begin and end as the
 * hash's room_r, room_ttl, room_gate. */
void publish_voucher(struct http_req *r, int64_t voucher_id, int64_t stock, int64_t begin,
                     int64_t end, int k, const struct store_room *room,
                     void (*done)(struct http_req *r, int ok));

#endif

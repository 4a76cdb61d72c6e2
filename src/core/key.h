/* keys.h -- the names of every Redis key the service uses, in one place.
 *
 * All keys of one flash-sale voucher share the hash tag {<id>}, so the admission script's
 * keys sit in one Redis Cluster slot:
 *   seckill:voucher:{42}  hash  stock, begin, end (epoch s), ep (Redis generation), seeded
 *                         (buyers a rebuild took from SQL) -- what admission reads
 *   seckill:order:{42}    hash  userId -> orderId: who bought (one per user)
 *   seckill:stream:{42}   stream of admitted orders, one entry per admission call, one
 *                         field os = "ts ep orderId userId ..." (the format and its
 *                         reader: sentry.h)
 *   seckill:rebuild:{42}  lock of a rebuild from SQL (rebuild.h): owner token, PX
 *   seckill:rebuild:buyers:{42}  buyers a rebuild prepares, renamed into place at the end
 *   seckill:dead:{42}     stream of entries the writer could not turn into orders
 *   seckill:room:{42}     zset, the voucher's waiting room: userId -> place (room.lua)
 *   seckill:room:issued:{42}  hash userId -> ms of the start of the user's pass
 *                         (the room's settings are fields room_r, room_ttl, room_gate and
 *                         its FIFO counter room_seq of the voucher hash)
 * A voucher sold from K > 1 stock buckets (buckets.h) keeps bucket 0 under {42} (the keys
 * above, plus field buckets = K in the voucher hash) and bucket b >= 1 under its own tag
 * {42.b<b>.<salt>} (key_btag: the salt places the tag's slot a b/K turn of the slot
 * ring away from {42}'s, so the buckets spread over the masters), with the same voucher
 * hash, buyers, stream and dead letters as {42} has, and per bucket (any b):
 *   seckill:xfer:{tag}    hash  transfer id -> "<receiver bucket> <units> <ms>": units
 *                         this bucket gave away and the receiver may not have yet
 *   seckill:xfer:applied:{tag}  set of transfer ids this bucket has received
 * Process-wide keys:
 *   seckill:streams       set of voucher ids whose streams the writers read; a bucket
 *                         b >= 1 of a K-bucket voucher is the member "<id>.<b>.<K>"
 *   {seckill:streams}:drained  set of members of seckill:streams whose sale has ended and
 *                         whose every admitted order is in SQL, added by the writers;
 *                         order lookups skip them (orders.h). Its hash tag puts it in
 *                         seckill:streams' slot, so one SDIFF reads both on a cluster
 *   seckill:instance      counter leasing order-id instance slots
 *   seckill:{board}:instance:<name>  string, one instance's snapshot for the sale board,
 *                         PX 5 s, renewed each second; seckill:{board}:instances: set of
 *                         their names (src/server/board.lua, board.h). One hash tag: on a
 *                         Redis Cluster the board's announcements live in one slot
 * Login (the course's names):
 *   login:code:<phone>    string, 2 minutes
 *   {login:code:<phone>}:fails  counter of wrong guesses against that code, living as
 *                         long as the code (its hash tag puts it in the code's slot)
 *   {login:code:<phone>}:guess  hash: who asked for that code (owner) and each other
 *                         client's wrong guesses (c:<client>, others); lives as the code
 *   {login:code:<phone>}:sent   hash: the phone's code bucket (tok, ms) and its codes of
 *                         the current 24 hours (d, d0); --rate-phone-code, --code-day-cap
 *   login:token:<token>   hash id, nickName, icon; sliding TTL
 *   seckill:revoked       zset of logged-out tokens, score = when the entry can go (revoke.h)
 * Bot gate (room/pow.h, which builds the name):
 *   seckill:pow:{<id>}:<mac>  string, a used proof-of-work challenge, PX until its expiry;
 *                         in the voucher's slot ({0}: the login codes' scope)
 * Shop cache (the course's names; src/cache/cacheaside.h, src/api/api_shop.c):
 *   cache:shop:<id>       string, the shop's JSON, or "" for "no such shop"; 30 / 2 minutes
 *                         plus jitter
 *   lock:shop:<id>        string, the mutex of a cache fill (a random token), PX 10 s
 *   cache:shop-type       string, the shop-type list's JSON; 30 minutes plus jitter
 *   lock:shop-type        its fill's mutex
 * Pub/sub channel (not a key; broadcast on a Redis Cluster):
 *   seckill:revoke        a logged-out token, to every worker of every instance (revoke.h)
 * The consumer group on every order stream is "g1" (the course's). The lab's course steps
 * name their own keys (src/lab/lab.h). */
#ifndef SECKILL_KEYS_H
#define SECKILL_KEYS_H

#include <stddef.h>
#include <stdint.h>

#define KEY_GROUP "g1"
#define KEY_REVOKED "seckill:revoked"
#define CHANNEL_REVOKE "seckill:revoke"
#define KEY_STREAMS "seckill:streams"
#define KEY_DRAINED "{seckill:streams}:drained"
/* a random token each rebuild from SQL writes (src/rebuild/): the payment-timeout scan
 * starts again from SQL's first order when it changes (src/writer/writer_life.c) */
#define KEY_REBUILT "{seckill:streams}:rebuilt"
#define KEY_INSTANCE "seckill:instance"
#define KEY_BOARD_INSTANCES "seckill:{board}:instances"
/* + an instance name: its last board snapshot (board.lua writes it, with a TTL) */
#define KEY_BOARD_INSTANCE "seckill:{board}:instance:"
#define KEY_CACHE_SHOP_TYPES "cache:shop-type"
#define KEY_LOCK_SHOP_TYPES "lock:shop-type"

/* Each writes a NUL-terminated key into buf and returns its length (or -1 if too small). */
int key_voucher(char *buf, size_t len, int64_t voucher_id);
int key_buyers(char *buf, size_t len, int64_t voucher_id);
int key_stream(char *buf, size_t len, int64_t voucher_id);
int key_dead(char *buf, size_t len, int64_t voucher_id);
int key_room(char *buf, size_t len, int64_t voucher_id);
int key_room_issued(char *buf, size_t len, int64_t voucher_id);
int key_rebuild_lock(char *buf, size_t len, int64_t voucher_id);
int key_rebuild_buyers(char *buf, size_t len, int64_t voucher_id);
/* A bucket's hash tag (without braces): "<id>" for bucket 0, else "<id>.b<b>.<salt>"
 * with the salt that places it (see above); nbuckets in 2..KEY_BUCKETS_MAX. */
#define KEY_BUCKETS_MAX 16
int key_btag(char *buf, size_t len, int64_t voucher_id, int bucket, int nbuckets);
/* The salt key_btag picks (0 for bucket 0), and the tag from a known salt (no search). */
unsigned key_bsalt(int64_t voucher_id, int bucket, int nbuckets);
int key_btag_salt(char *buf, size_t len, int64_t voucher_id, int bucket, unsigned salt);
/* The keys under a tag: seckill:voucher:{tag}, seckill:order:{tag}, seckill:stream:{tag},
 * seckill:dead:{tag}, seckill:xfer:{tag}, seckill:xfer:applied:{tag}. */
int key_voucher_t(char *buf, size_t len, const char *tag);
int key_buyers_t(char *buf, size_t len, const char *tag);
int key_stream_t(char *buf, size_t len, const char *tag);
int key_dead_t(char *buf, size_t len, const char *tag);
/* A bucket's rebuild lock and staged buyers (rebuild.c): seckill:rebuild:{tag},
 * seckill:rebuild:buyers:{tag} -- for bucket 0 the same keys as key_rebuild_lock/_buyers. */
int key_rebuild_lock_t(char *buf, size_t len, const char *tag);
int key_rebuild_buyers_t(char *buf, size_t len, const char *tag);
/* ... and its staged order states (life.lua's seckill:ostate:{tag}): seckill:rebuild:ostate:{tag} */
int key_rebuild_ostate_t(char *buf, size_t len, const char *tag);
int key_xfer_log(char *buf, size_t len, const char *tag);
/* The order lifecycle's, per bucket (src/order/life.lua, docs/lifecycle.md):
 *   seckill:ostate:{tag}  hash orderId -> "<state> <ts> <userId>" of orders that left
 *                         status 1 (c cancelled, t timed out, p paid, r refunded)
 *   seckill:paysweep:{tag} string: the last entry of the bucket's stream whose orders the
 *                         payment-deadline sweep has passed (the stream is the due index) */
int key_ostate_t(char *buf, size_t len, const char *tag);
int key_paysweep_t(char *buf, size_t len, const char *tag);
/*   seckill:refunds:{tag}  stream: the bucket's refund outbox -- a refund life.lua decided,
 *                          until the order writer has sent it (src/writer/writer_refund.c) */
int key_refunds_t(char *buf, size_t len, const char *tag);
/*   seckill:payid:<paymentId>  string: the order a payment notice's id was taken for, EX 1 h
 *                          (its SQL row answers after that; src/order/life.c) */
int key_payid(char *buf, size_t len, const char *payment_id);
int key_xfer_applied(char *buf, size_t len, const char *tag);
/* Parses a member "<id>.<b>.<K>" of seckill:streams (stock bucket b >= 1 of a voucher with
 * K buckets) of n bytes at z: 0 with *voucher_id, *bucket, *nbuckets set, or -1 if it is
 * not one (a plain voucher id is not). */
int key_bmember_parse(const char *z, size_t n, int64_t *voucher_id, int *bucket, int *nbuckets);
/* The member of seckill:streams naming bucket b of a voucher with K buckets ("<id>" for
 * b = 0, "<id>.<b>.<K>" else) and, if ks, that bucket's stream key. Length of the member,
 * or -1 (out of range). */
int key_bmember(char *buf, size_t len, char *ks, size_t kslen, int64_t voucher_id, int bucket,
                int nbuckets);
int key_login_code(char *buf, size_t len, const char *phone);
int key_login_fails(char *buf, size_t len, const char *phone);
int key_login_guess(char *buf, size_t len, const char *phone);
int key_login_sent(char *buf, size_t len, const char *phone);
int key_login_token(char *buf, size_t len, const char *token);
int key_cache_shop(char *buf, size_t len, int64_t shop_id);
int key_lock_shop(char *buf, size_t len, int64_t shop_id);

#endif

/* sentry.h -- the order stream's entry format: what src/sale/admit.lua writes into
 * seckill:stream:{<voucherId>}, and the one reader of it that the order writer, a rebuild
 * from SQL and the audit share.
 *
 * An entry carries every order one admit.lua call admitted (up to the 64 admissions
 * admission.c sends together), in one field:
 *
 *     os  "<ts> <ep> <orderId> <userId> [<orderId> <userId> ...]"   (decimal, one space
 *                                                                     between)
 *
 * orderId and userId are positive; ts is the admission's second by Redis's clock (TIME,
 * one per call); ep is the voucher's Redis generation at admission (0 until a rebuild from
 * SQL; the writer fences orders of a replaced generation, store.h). The voucher is the
 * stream's own: its key names it. One entry per call instead of one per order makes the
 * script's XADDs, their AOF records, the writer's XREADGROUP reply, the consumer group's
 * pending list and its XACKs a fraction of what they were (docs/performance.md,
 * "Where the time goes"). An entry is one unit: the writer acks it once ALL its orders are in SQL,
 * and an entry with one bad order is moved to the dead letters whole; an entry without
 * an os field is bad too.
 *
 * An order's later lifecycle events (src/order/life.lua) travel in the same stream, behind
 * the order's own entry, as an entry with field ev or evs instead of os. A cancel or a
 * payment writes one event:
 *
 *     ev   "<kind> <orderId> <userId> <ts> <ep>"   kind c cancelled, t timed out, p paid,
 *                                                   r a payment refunded (after c or t)
 *
 * and a payment-deadline call (expire) one entry for every order it timed out, as
 * admission does for the orders it admitted:
 *
 *     evs  "t <ts> <ep> <orderId> <userId> [<orderId> <userId> ...]"
 *
 * (kind c or t: an evs entry has no payment; ts and ep as in ev, shared by its events; at
 * most SENTRY_MAX_EVENTS pairs -- life.lua begins another entry past that; a call that
 * timed out no order writes none). Either may carry `free 1` (every event of the entry
 * freed its buyer: --cancel-frees-buyer). An evs entry is one unit like an os entry: the
 * writer acks it once all its events are applied, and one bad pair makes it bad whole.
 * Before evs an expire call wrote one ev entry per order: those stay readable.
 *
 * sentry_evopen / sentry_evnext tell an event entry of either form apart and read its
 * events (sentry_event reads an ev entry alone). A reader that knows only os finds no os
 * field in it and moves it to the dead letters: never mistakes it for an order.
 *
 * sentry_open / sentry_next read one entry of any reply (XREADGROUP, XAUTOCLAIM, XRANGE):
 * pure functions, any thread. sentry_scan reads a whole stream (XRANGE in pages) with them,
 * for the readers that want every entry (a rebuild, the audit). */
#ifndef SECKILL_SENTRY_H
#define SECKILL_SENTRY_H

#include <stddef.h>
#include <stdint.h>

struct redisContext;
struct redisReply;

/* One order of an entry. */
typedef struct sentry {
    int64_t order_id;
    int64_t user_id;
    int64_t ts;   /* 0 allowed: the reader falls back on the entry id's time */
    int64_t ep;
} sentry_t;

/* An entry's orders, one after the other (sentry_next). Borrows the reply. */
typedef struct sentry_it {
    size_t bound;         /* at most this many orders (sentry_open's *bound) */
    size_t taken;         /* orders sentry_next returned */
    const char *p, *end;  /* the next "<orderId> <userId>" pair, the value's end */
    int64_t ts, ep;       /* shared by the entry's orders */
} sentry_it_t;

/* Opens an entry's field/value array (the second element of an XRANGE / XREADGROUP
 * entry): checks the fields, ts and ep, and sets *bound (>= 1) to at most how many orders
 * the entry may hold, so a reader can make room for them first. 0, or -1 with *reason set
 * to a short static text (e.g. "bad ts", "no os field"). Each order is checked as
 * sentry_next returns it: every number is read once (the writer reads millions). */
int sentry_open(const struct redisReply *fields, sentry_it_t *it, size_t *bound,
                const char **reason);

/* The next order of an opened entry: 1 with *out, 0 when there is none left, -1 with
 * *reason (e.g. "missing or bad userId") when the entry is bad. An entry is one unit:
 * once it says -1, drop every order taken from it. */
int sentry_next(sentry_it_t *it, sentry_t *out, const char **reason);

/* A lifecycle event (an ev field, or one pair of an evs field). */
typedef struct sentry_ev {
    char kind;            /* 'c' cancelled by the buyer, 't' payment timed out, 'p' paid,
                             'r' a payment refunded (the order was cancelled first) */
    int64_t order_id;
    int64_t user_id;
    int64_t ts;           /* Redis's clock when it was decided */
    int64_t ep;           /* the voucher's Redis generation then */
} sentry_ev_t;

/* An entry's field/value array: 1 with *ev when it is an event entry, 0 when it has no ev
 * field (an order entry, or a bad one: sentry_open says), -1 with *reason when its ev is
 * malformed. Pure. */
int sentry_event(const struct redisReply *fields, sentry_ev_t *ev, const char **reason);

/* The most events life.lua puts in one evs entry (an expire call of more orders writes
 * more entries); the writer's calls hold 32. */
#define SENTRY_MAX_EVENTS 1024

/* An event entry's events, one after the other (sentry_evnext). Borrows the reply. */
typedef struct sentry_evit {
    int multi;            /* an evs entry (else one ev event, in one) */
    char kind;            /* evs: its events' kind */
    size_t bound;         /* at most this many events (sentry_evopen's *bound) */
    size_t taken;         /* events sentry_evnext returned */
    const char *p, *end;  /* evs: the next "<orderId> <userId>" pair, the value's end */
    int64_t ts, ep;       /* evs: shared by the entry's events */
    sentry_ev_t one;      /* ev: the event */
} sentry_evit_t;

/* Opens an entry's field/value array as an event entry of either form: 1 with *bound
 * (>= 1) at most how many events it holds (a reader makes room for them first), 0 when
 * it has neither field (an order entry, or a bad one: sentry_open says), -1 with *reason
 * when the event is malformed (an ev as sentry_event says; evs: its kind, ts or ep, or both
 * fields). Each evs pair is checked as sentry_evnext returns it. Pure. */
int sentry_evopen(const struct redisReply *fields, sentry_evit_t *it, size_t *bound,
                  const char **reason);

/* The next event of an opened event entry: 1 with *out, 0 when there is none left, -1
 * with *reason (a missing or bad number, more than *bound) -- the entry is then bad whole:
 * drop every event taken from it. */
int sentry_evnext(sentry_evit_t *it, sentry_ev_t *out, const char **reason);

/* What sentry_scan hands over per entry: its id ("<ms>-<seq>") and either its orders
 * (n >= 1, all of them checked; reason NULL) or, for a bad entry, orders NULL, n 0 and
 * reason. Returns 0 to go on. The orders are valid until it returns. */
typedef int (*sentry_scan_fn)(void *ctx, const char *id, const sentry_t *orders, size_t n,
                              const char *reason);

/* Every order entry of stream key (event entries of either form are skipped), oldest first: XRANGE in pages of 10,000 entries on c (its
 * socket timeout is each page's deadline), each entry to fn. 0; -1 with err set when
 * Redis failed ("XRANGE <key>: ...") or fn did not return 0 (err untouched then). */
int sentry_scan(struct redisContext *c, const char *key, sentry_scan_fn fn, void *ctx,
                char *err, size_t errlen);

#endif

/* rarena.h -- hiredis replies built in an arena: allocated in bulk, released together.
 *
 * hiredis's own reply functions make every element and every string its own calloc and
 * malloc, and freeReplyObject frees them one by one: for the order writer's XREADGROUP
 * replies (a dozen objects per order) that was a quarter of its CPU. A reader attached to
 * an arena builds the same redisReply trees in big chunks instead; nothing is freed per
 * reply, rarena_reset() releases everything handed out so far at once.
 *
 * Ownership: the arena owns every reply built by an attached reader until the next
 * rarena_reset() (or rarena_free()). Such replies must never go to freeReplyObject();
 * the reader's own freeObject (used by hiredis on errors) does nothing. One thread at a
 * time, like the connection it serves. Out of memory aborts (xmem.h). */
#ifndef SECKILL_RARENA_H
#define SECKILL_RARENA_H

#include <stddef.h>

struct redisReader;

typedef struct rarena rarena_t;

rarena_t *rarena_new(void);
void rarena_free(rarena_t *a);   /* NULL is fine; no attached reader may be used after */

/* Every reply r builds from now on lives in a (r->fn and r->privdata are set). */
void rarena_attach(rarena_t *a, struct redisReader *r);

/* Releases every reply built so far. Keeps up to RARENA_KEEP bytes of chunks for reuse. */
void rarena_reset(rarena_t *a);

/* n bytes (aligned for any type) that live until the next reset, for replies composed
 * by hand out of arena replies. */
void *rarena_alloc(rarena_t *a, size_t n);

#endif

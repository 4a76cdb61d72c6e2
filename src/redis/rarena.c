/* rarena.c -- hiredis replies built in an arena (rarena.h).
 *
 * The arena is a list of chunks used front to back; an allocation that does not fit in
 * the current chunk moves to the next one (reused after a reset) or appends a new one at
 * least as big as the request. A reset rewinds to the first chunk and frees the chunks
 * past RARENA_KEEP bytes, so one huge reply does not pin its memory for ever.
 *
 * The reply functions build exactly what hiredis 0.14's defaults build (hiredis.c:
 * createStringObject and friends): the same redisReply fields, str NUL-terminated,
 * element[] of the announced size, each object linked into its parent's slot. */
#include "redis/rarena.h"

#include <stdalign.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include <hiredis/hiredis.h>

#include "core/xmem.h"

#define RARENA_CHUNK (64 * 1024)
#define RARENA_KEEP (1024 * 1024)

typedef struct chunk {
    struct chunk *next;
    size_t cap, used;
    alignas(max_align_t) unsigned char data[];
} chunk_t;

struct rarena {
    chunk_t *head, *cur;
};

rarena_t *rarena_new(void)
{
    return xcalloc(1, sizeof(rarena_t));
}

void rarena_free(rarena_t *a)
{
    if (a == NULL)
        return;
    for (chunk_t *c = a->head; c != NULL;) {
        chunk_t *next = c->next;
        free(c);
        c = next;
    }
    free(a);
}

void *rarena_alloc(rarena_t *a, size_t n)
{
    const size_t al = alignof(max_align_t);
    n = (n + al - 1) & ~(al - 1);
    for (;;) {
        chunk_t *c = a->cur;
        if (c != NULL && c->cap - c->used >= n) {
            void *p = c->data + c->used;
            c->used += n;
            return p;
        }
        if (c != NULL && c->next != NULL) {
            a->cur = c->next;
            a->cur->used = 0;
            continue;
        }
        size_t cap = n > RARENA_CHUNK ? n : RARENA_CHUNK;
        chunk_t *fresh = xmalloc(sizeof(*fresh) + cap);
        fresh->next = NULL;
        fresh->cap = cap;
        fresh->used = 0;
        if (c != NULL)
            c->next = fresh;
        else
            a->head = fresh;
        a->cur = fresh;
    }
}

void rarena_reset(rarena_t *a)
{
    size_t kept = 0;
    chunk_t **link = &a->head;
    while (*link != NULL) {
        chunk_t *c = *link;
        if (kept + c->cap > RARENA_KEEP && link != &a->head) {
            *link = c->next;
            free(c);
            continue;
        }
        kept += c->cap;
        link = &c->next;
    }
    a->cur = a->head;
    if (a->cur != NULL)
        a->cur->used = 0;
}

/* ------------------------------------------------------------ reader functions */

static redisReply *reply_new(const redisReadTask *task, int type, size_t extra)
{
    redisReply *r = rarena_alloc(task->privdata, sizeof(*r) + extra);
    memset(r, 0, sizeof(*r));
    r->type = type;
    if (task->parent != NULL) {
        redisReply *parent = task->parent->obj;
        parent->element[task->idx] = r;
    }
    return r;
}

static void *make_string(const redisReadTask *task, char *str, size_t len)
{
    redisReply *r = reply_new(task, task->type, len + 1);
    r->str = (char *)(r + 1);
    if (len > 0)
        memcpy(r->str, str, len);
    r->str[len] = '\0';
    r->len = len;
    return r;
}

static void *make_array(const redisReadTask *task, int elements)
{
    size_t n = elements > 0 ? (size_t)elements : 0;
    redisReply *r = reply_new(task, REDIS_REPLY_ARRAY, n * sizeof(redisReply *));
    if (n > 0) {
        r->element = (redisReply **)(void *)(r + 1);
        memset(r->element, 0, n * sizeof(redisReply *));
    }
    r->elements = n;
    return r;
}

static void *make_integer(const redisReadTask *task, long long value)
{
    redisReply *r = reply_new(task, REDIS_REPLY_INTEGER, 0);
    r->integer = value;
    return r;
}

static void *make_nil(const redisReadTask *task)
{
    return reply_new(task, REDIS_REPLY_NIL, 0);
}

static void release_nothing(void *reply)
{
    (void)reply;   /* the arena's reset releases it */
}

static redisReplyObjectFunctions arena_functions = {
    make_string, make_array, make_integer, make_nil, release_nothing,
};

void rarena_attach(rarena_t *a, struct redisReader *r)
{
    r->fn = &arena_functions;
    r->privdata = a;
}

/* xmem.h -- allocation that cannot fail: out of memory logs one line and aborts.
 *
 * This is the service's memory policy (docs/design.md, "Memory policy"): the service and
 * its tools allocate through these and never check for NULL; what a client can make us
 * allocate is bounded before we allocate it (request limits, connection caps, the
 * buffered-bytes budget answer 503/close instead). A process that cannot allocate is
 * better restarted than limping: admitted orders live in Redis, not in our memory. */
#ifndef SECKILL_XMEM_H
#define SECKILL_XMEM_H

#include <stdlib.h>
#include <string.h>

#include "core/log.h"

/* realloc that never returns NULL (a size of 0 still returns a unique pointer). */
static inline void *xrealloc(void *p, size_t n)
{
    void *q = realloc(p, n ? n : 1);
    if (!q) {
        log_error("out of memory (%zu bytes)", n);
        abort();
    }
    return q;
}

/* malloc and calloc that never return NULL. */
static inline void *xmalloc(size_t n)
{
    return xrealloc(NULL, n);
}

static inline void *xcalloc(size_t nmemb, size_t size)
{
    void *p = calloc(nmemb ? nmemb : 1, size ? size : 1);
    if (!p) {
        log_error("out of memory (%zu x %zu bytes)", nmemb, size);
        abort();
    }
    return p;
}

/* strdup that never returns NULL; free() the result. */
static inline char *xstrdup(const char *z)
{
    size_t n = strlen(z) + 1;
    char *p = xrealloc(NULL, n);
    memcpy(p, z, n);
    return p;
}

/* strndup that never returns NULL: at most n bytes of z, NUL-terminated; free() it. */
static inline char *xstrndup(const char *z, size_t n)
{
    size_t len = strnlen(z, n);
    char *p = xrealloc(NULL, len + 1);
    memcpy(p, z, len);
    p[len] = '\0';
    return p;
}

#endif

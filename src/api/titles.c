/* titles.c -- the board's cache of sale titles (titles.h). */
#include "api/titles.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "core/sb.h"
#include "core/xmem.h"
#include "store/store.h"

typedef struct title {
    int64_t id;                 /* 0 = unused */
    char *text;
} title_t;

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static title_t cache[TITLES_MAX];
static size_t next_slot;        /* where the next new title goes (round robin) */

int titles_get(int64_t voucher_id, sb_t *out)
{
    int found = 0;
    pthread_mutex_lock(&mu);
    for (size_t i = 0; i < TITLES_MAX; i++) {
        if (cache[i].id == voucher_id && voucher_id != 0) {
            sb_json_str(out, cache[i].text, strlen(cache[i].text));
            found = 1;
            break;
        }
    }
    pthread_mutex_unlock(&mu);
    return found;
}

static void put(int64_t id, const char *text)
{
    pthread_mutex_lock(&mu);
    size_t at = next_slot;
    for (size_t i = 0; i < TITLES_MAX; i++) {
        if (cache[i].id == id) {
            at = i;
            break;
        }
    }
    if (at == next_slot)
        next_slot = (next_slot + 1) % TITLES_MAX;
    free(cache[at].text);
    cache[at].id = id;
    cache[at].text = xstrdup(text);
    pthread_mutex_unlock(&mu);
}

void titles_load(store_t *st, const int64_t *ids, size_t n)
{
    for (size_t i = 0; st != NULL && i < n; i++) {
        store_voucher_t v;
        memset(&v, 0, sizeof v);
        int rc = store_voucher_get(st, ids[i], &v);
        if (rc == STORE_OK)
            put(ids[i], v.title != NULL ? v.title : "");
        else if (rc == STORE_NOTFOUND)
            put(ids[i], "");
        store_voucher_clear(&v);
        if (rc == STORE_ERR)
            break;             /* SQL is away: the next board request asks again */
    }
}

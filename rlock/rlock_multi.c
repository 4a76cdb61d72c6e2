/*
 * rlock_multi.c -- one lock made of locks on several independent Redis
 * servers, all-or-nothing.
 *
 * RLOCK_MULTI_ALL (Redisson MultiLock): members are taken in a global order
 * (server address, then name), waiting on a contended member with what is
 * left of the budget; any failure releases everything taken in the round.
 * RLOCK_MULTI_MAJORITY (Redlock): every member gets one attempt per round;
 * the round succeeds with n/2+1 members.  In both policies a round only
 * counts if every member taken is still valid at the end (its local deadline
 * = its acquire start + lease - drift has not passed), i.e. the time spent
 * acquiring is checked against the lease.  The result never claims a member
 * that is not held: member_held[] is set only from OK replies and cleared by
 * every release.
 */
#include "rlock_int.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

struct rlock_multi {
    size_t n;
    rlock_t **locks;
    size_t *order;            /* acquisition order (indices into locks) */
    bool *held;
    rlock_multi_policy_t policy;
    bool is_held;
};

typedef struct {
    size_t idx;
    char addr[300];
    const char *name;
    int kind;
} sort_item_t;

static int cmp_item(const void *a, const void *b)
{
    const sort_item_t *x = a, *y = b;
    int r = strcmp(x->addr, y->addr);
    if (!r) r = strcmp(x->name, y->name);
    if (!r) r = x->kind - y->kind;
    if (!r) r = x->idx < y->idx ? -1 : x->idx > y->idx;
    return r;
}

rlock_status_t rlock_multi_new(rlock_t *const *locks, size_t n,
                               rlock_multi_policy_t policy, rlock_multi_t **out)
{
    if (!locks || n == 0 || !out || policy > RLOCK_MULTI_MAJORITY) return RLOCK_EINVAL;
    for (size_t i = 0; i < n; i++)
        if (!locks[i] || locks[i]->kind == RLOCK_READ || locks[i]->kind == RLOCK_WRITE ||
            locks[i]->kind == RLOCK_FAIR)
            return RLOCK_EINVAL;
    rlock_multi_t *m = rlock__xcalloc(1, sizeof *m);
    m->n = n;
    m->policy = policy;
    m->locks = rlock__xcalloc(n, sizeof *m->locks);
    memcpy(m->locks, locks, n * sizeof *m->locks);
    m->held = rlock__xcalloc(n, sizeof *m->held);
    m->order = rlock__xcalloc(n, sizeof *m->order);
    sort_item_t *it = rlock__xcalloc(n, sizeof *it);
    for (size_t i = 0; i < n; i++) {
        it[i].idx = i;
        rlock__client_addr(locks[i]->c, it[i].addr, sizeof it[i].addr);
        it[i].name = locks[i]->name;
        it[i].kind = (int)locks[i]->kind;
    }
    qsort(it, n, sizeof *it, cmp_item);
    for (size_t i = 0; i < n; i++) m->order[i] = it[i].idx;
    free(it);
    *out = m;
    return RLOCK_OK;
}

void rlock_multi_free(rlock_multi_t *m)
{
    if (!m) return;
    free(m->locks);
    free(m->held);
    free(m->order);
    free(m);
}

static size_t needed(const rlock_multi_t *m)
{
    return m->policy == RLOCK_MULTI_ALL ? m->n : m->n / 2 + 1;
}

static void release_all(rlock_multi_t *m)
{
    for (size_t i = 0; i < m->n; i++) {
        if (m->held[i]) {
            rlock_unlock(m->locks[i]);
            m->held[i] = false;
        }
    }
    m->is_held = false;
}

static void sleep_us(int64_t us)
{
    if (us <= 0) return;
    struct timespec ts = { .tv_sec = us / 1000000, .tv_nsec = (us % 1000000) * 1000 };
    nanosleep(&ts, NULL);
}

rlock_status_t rlock_multi_try_lock(rlock_multi_t *m, int64_t wait_ms, int64_t lease_ms)
{
    if (!m) return RLOCK_EINVAL;
    if (m->is_held) return RLOCK_EINVAL;
    if (wait_ms < 0 && wait_ms != RLOCK_WAIT_FOREVER) return RLOCK_EINVAL;
    if (lease_ms != RLOCK_WATCHDOG && (lease_ms <= 0 || wait_ms < 0 || lease_ms <= wait_ms))
        return RLOCK_EINVAL;

    size_t need = needed(m);
    int64_t start = rlock__now_us();
    int64_t deadline = wait_ms < 0 ? INT64_MAX : start + wait_ms * 1000;
    unsigned seed = (unsigned)start ^ (unsigned)(uintptr_t)m;
    rlock_status_t last = RLOCK_TIMEOUT;

    for (;;) {
        size_t got = 0, errs = 0;
        for (size_t k = 0; k < m->n; k++) {
            size_t i = m->order[k];
            int64_t now = rlock__now_us();
            int64_t w = 0;
            if (m->policy == RLOCK_MULTI_ALL)
                w = deadline == INT64_MAX ? RLOCK_WAIT_FOREVER
                    : (deadline > now ? (deadline - now) / 1000 : 0);
            rlock_status_t st = rlock__acquire(m->locks[i], w, lease_ms);
            if (st == RLOCK_OK) {
                m->held[i] = true;
                got++;
            } else if (st == RLOCK_EINVAL) {
                release_all(m);
                return st;
            } else if (st == RLOCK_REDIS_ERROR) {
                errs++;
            }
            if (m->policy == RLOCK_MULTI_ALL && st != RLOCK_OK) break;
            if (got + (m->n - k - 1) < need) break;   /* cannot reach quorum */
        }
        /* Count only members still valid now: the budget spent acquiring
         * is checked against each member's lease. */
        size_t valid = 0;
        for (size_t i = 0; i < m->n; i++)
            if (m->held[i] && rlock_is_valid(m->locks[i])) valid++;
        if (got >= need && valid >= need) {
            m->is_held = true;
            return RLOCK_OK;
        }
        release_all(m);
        last = (errs > 0 && m->n - errs < need) ? RLOCK_REDIS_ERROR : RLOCK_TIMEOUT;
        if (errs > 0 && m->policy == RLOCK_MULTI_ALL) last = RLOCK_REDIS_ERROR;
        int64_t now = rlock__now_us();
        if (now >= deadline) return last;
        /* random back-off, 5..50 ms, within the budget */
        int64_t d = 5000 + (int64_t)(rand_r(&seed) % 45000);
        if (now + d > deadline) d = deadline - now;
        sleep_us(d);
    }
}

rlock_status_t rlock_multi_unlock(rlock_multi_t *m)
{
    if (!m) return RLOCK_EINVAL;
    if (!m->is_held) return RLOCK_NOT_OWNER;
    rlock_status_t worst = RLOCK_OK;
    for (size_t i = 0; i < m->n; i++) {
        if (!m->held[i]) continue;
        rlock_status_t st = rlock_unlock(m->locks[i]);
        m->held[i] = false;
        if (st == RLOCK_REDIS_ERROR) worst = st;
        else if (st != RLOCK_OK && worst == RLOCK_OK) worst = RLOCK_LOST;
    }
    m->is_held = false;
    return worst;
}

bool rlock_multi_member_held(const rlock_multi_t *m, size_t i)
{
    return m && i < m->n && m->held[i];
}

size_t rlock_multi_held_count(const rlock_multi_t *m)
{
    size_t k = 0;
    for (size_t i = 0; m && i < m->n; i++) k += m->held[i];
    return k;
}

bool rlock_multi_is_valid(const rlock_multi_t *m)
{
    if (!m || !m->is_held) return false;
    size_t valid = 0;
    for (size_t i = 0; i < m->n; i++)
        if (m->held[i] && rlock_is_valid(m->locks[i])) valid++;
    return valid >= needed(m);
}

/* admin.c -- the x-admin-token guessing throttle (admin.h): one guessing budget per
 * client address for the instance, a counter, and a rate-limited log line. */
#include <pthread.h>
#include <stdio.h>

#include "auth/admin.h"
#include "auth/guard.h"
#include "core/app.h"
#include "core/clock.h"
#include "core/log.h"
#include "http/clientip.h"
#include "http/http.h"
#include "sale/ratelimit.h"
#include "server/metrics.h"
#include "server/worker.h"

#define ADMIN_ENTRIES 4096u
#define LOG_EVERY_MS 10000u

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static guard_t *table;          /* made on first use from the config */
static int made;
static uint64_t last_log_ms;    /* mono */
static uint64_t unlogged;       /* wrong tokens since the last line */

/* The client's key (clientip.h: the peer, or the trusted proxy's client). */
static uint64_t client_key(const struct http_req *r, char *ip, size_t cap)
{
    const char *a = clientip_of(r->w->app->trusted, r->peer, r->forwarded_for, ip, cap);
    if (a != ip) {
        snprintf(ip, cap, "%s", a != NULL ? a : "unknown");
    }
    return ratelimit_key_ip(ip);
}

/* Under mu. */
static guard_t *table_of(const struct http_req *r)
{
    if (!made) {
        const config_rate_t *c = &r->w->app->cfg.rate_ip_admin;
        table = guard_new(c->per_s, c->burst, ADMIN_ENTRIES);
        made = 1;
    }
    return table;
}

int admin_allowed(struct http_req *r)
{
    char ip[64];
    uint64_t key = client_key(r, ip, sizeof ip);
    uint64_t now = clock_mono_ms();
    pthread_mutex_lock(&mu);
    guard_t *g = table_of(r);
    int ok = guard_ok(g, key, now);
    if (!ok) {
        r->retry_after_s = guard_retry_s(g);
    }
    pthread_mutex_unlock(&mu);
    return ok;
}

void admin_wrong(struct http_req *r)
{
    char ip[64];
    uint64_t key = client_key(r, ip, sizeof ip);
    uint64_t now = clock_mono_ms();
    if (r->w->m != NULL) {
        shard_inc(&r->w->m->admin_token_refused);
    }
    pthread_mutex_lock(&mu);
    guard_charge(table_of(r), key, now);
    unlogged++;
    uint64_t n = 0;
    if (last_log_ms == 0 || now - last_log_ms >= LOG_EVERY_MS) {
        n = unlogged;
        unlogged = 0;
        last_log_ms = now;
    }
    pthread_mutex_unlock(&mu);
    if (n > 0) {
        log_warn("admin: wrong x-admin-token from %s (%llu wrong since the last such line)", ip,
                 (unsigned long long)n);
    }
}

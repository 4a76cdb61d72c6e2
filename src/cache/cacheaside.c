/* cacheaside.c -- cache-aside reads with a Redis mutex against breakdown (cacheaside.h).
 *
 * One operation walks: GET key -> (miss) SET lock NX PX -> GET key again -> loader on a
 * jobs thread -> SET key EX ttl+jitter -> reply -> release the lock. A waiter's poll is a
 * libevent timer on the worker's loop, never a sleep. The value is written before the
 * lock is released (the release is sent from the SET's reply), so a waiter that finds
 * the lock free also finds the value, even when the two keys live on different Redis
 * Cluster nodes. */
#include "cache/cacheaside.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/event.h>
#include <hiredis/hiredis.h>

#include "core/app.h"
#include "core/clock.h"
#include "core/log.h"
#include "core/rnd.h"
#include "redis/rds.h"
#include "server/jobs.h"
#include "server/metrics.h"
#include "server/worker.h"
#include "core/xmem.h"

#define KEY_MAX 128

/* Deletes the lock only while it still holds this operation's token: a lock that
 * expired and was taken by another reader is not released by a late owner. */
static const char unlock_lua[] =
    "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) end "
    "return 0";

typedef struct ca_op {
    worker_t *w;
    const cacheaside_spec_t *spec;
    char key[KEY_MAX], lock_key[KEY_MAX];
    char token[33];
    cacheaside_load_fn load;
    void *load_arg;
    cacheaside_cb cb;
    void *priv;
    uint64_t wait_until_ms;          /* a waiter gives up after this (monotonic) */
    int locked;                      /* this operation holds lock_key */
    int uncached;                    /* Redis failed: answer from SQL, write nothing */
    int status;                      /* the loader's answer */
    char *json;
    size_t len;
} ca_op_t;

static void step_get(ca_op_t *op);

static void finish(ca_op_t *op, int status, const char *json, size_t len)
{
    cacheaside_cb cb = op->cb;
    void *priv = op->priv;
    cb(priv, status, json, len);
    free(op->json);
    free(op);
}

static void unlock(ca_op_t *op)
{
    if (!op->locked)
        return;
    op->locked = 0;
    const char *argv[] = { "EVAL", unlock_lua, "1", op->lock_key, op->token };
    size_t lens[] = { 4, sizeof unlock_lua - 1, 1, strlen(op->lock_key), strlen(op->token) };
    rds_command_at(op->w->rds, op->lock_key, lens[3], NULL, NULL, 5, argv, lens);
}

int cacheaside_jitter(int base_s)
{
    char hex[9];
    int span = (int)((long)base_s * CACHEASIDE_JITTER_PCT / 100);
    if (span <= 0 || rnd_hex(hex, 4) != 0)
        return base_s;
    return base_s + (int)(strtoul(hex, NULL, 16) % (unsigned long)(span + 1));
}

typedef struct forget_op {
    void (*cb)(void *priv, int ok);
    void *priv;
} forget_op_t;

static void on_forgotten(redisReply *rep, void *priv)
{
    forget_op_t op = *(forget_op_t *)priv;
    free(priv);
    op.cb(op.priv, rep != NULL && rep->type == REDIS_REPLY_INTEGER);
}

void cacheaside_forget(worker_t *w, const char *key, void (*cb)(void *priv, int ok), void *priv)
{
    forget_op_t *op = xcalloc(1, sizeof *op);
    op->cb = cb;
    op->priv = priv;
    const char *argv[] = { "DEL", key };
    size_t lens[] = { 3, strlen(key) };
    rds_command(w->rds, on_forgotten, op, 2, argv, lens);
}

/* ----------------------------------------------------------------- loading */

static void on_stored(redisReply *rep, void *priv)
{
    ca_op_t *op = priv;
    if (rep == NULL || rep->type == REDIS_REPLY_ERROR)
        log_warn("cache %s: could not store %s: %s", op->spec->name, op->key,
                 rep ? rep->str : "redis unavailable");
    unlock(op);
    finish(op, op->status, op->json, op->len);
}

static void run_load(struct store *st, void *arg)
{
    ca_op_t *op = arg;
    op->json = NULL;
    op->len = 0;
    op->status = st == NULL ? CACHEASIDE_UNAVAILABLE : op->load(st, op->load_arg, &op->json,
                                                                  &op->len);
    if (op->status == CACHEASIDE_FOUND && (op->json == NULL || op->len == 0))
        op->status = CACHEASIDE_UNAVAILABLE;   /* an empty value would read as "no row" */
}

static void done_load(worker_t *w, void *arg)
{
    ca_op_t *op = arg;
    if (op->status == CACHEASIDE_UNAVAILABLE || op->uncached) {
        unlock(op);
        finish(op, op->status, op->json, op->len);
        return;
    }
    int found = op->status == CACHEASIDE_FOUND;
    char ttl[16];
    int tl = snprintf(ttl, sizeof ttl, "%d",
                      cacheaside_jitter(found ? op->spec->ttl_s : op->spec->empty_ttl_s));
    const char *argv[] = { "SET", op->key, found ? op->json : "", "EX", ttl };
    size_t lens[] = { 3, strlen(op->key), found ? op->len : 0, 2, (size_t)tl };
    rds_command(w->rds, on_stored, op, 5, argv, lens);
}

static void submit_load(ca_op_t *op)
{
    metric_inc(&op->w->app->metrics->cache_loads);
    if (jobs_submit(op->w->app->jobs, op->w, run_load, done_load, op) != 0) {
        unlock(op);
        finish(op, CACHEASIDE_UNAVAILABLE, NULL, 0);
    }
}

/* ----------------------------------------------------------------- the mutex */

static void on_poll(evutil_socket_t fd, short what, void *arg)
{
    step_get(arg);
}

/* Redis down (NULL), an error, or a reply the command never gives (an array, an integer):
 * the read goes to SQL uncached, as when Redis is down. Besides ok_type only a nil is
 * Redis's own answer ("no key", "lock taken"); treating anything else as "taken" would
 * hold the reader in the poll for CACHEASIDE_WAIT_MS. */
static int unexpected(const redisReply *rep, int ok_type)
{
    return rep == NULL || (rep->type != ok_type && rep->type != REDIS_REPLY_NIL);
}

static void on_lock(redisReply *rep, void *priv)
{
    ca_op_t *op = priv;
    if (unexpected(rep, REDIS_REPLY_STATUS)) {
        op->uncached = 1;
        submit_load(op);
        return;
    }
    if (rep->type == REDIS_REPLY_STATUS) {
        op->locked = 1;
        step_get(op);   /* the double check: a holder may have filled it since our miss */
        return;
    }
    /* Taken (nil): poll the key until the holder has filled it or gone. */
    if (clock_mono_ms() >= op->wait_until_ms) {
        log_warn("cache %s: %s still locked after %d ms", op->spec->name, op->lock_key,
                 CACHEASIDE_WAIT_MS);
        finish(op, CACHEASIDE_UNAVAILABLE, NULL, 0);
        return;
    }
    struct timeval tv = { 0, CACHEASIDE_POLL_MS * 1000 };
    if (event_base_once(op->w->base, -1, EV_TIMEOUT, on_poll, op, &tv) != 0)
        finish(op, CACHEASIDE_UNAVAILABLE, NULL, 0);
}

static void take_lock(ca_op_t *op)
{
    char px[16];
    int pl = snprintf(px, sizeof px, "%d", CACHEASIDE_LOCK_MS);
    const char *argv[] = { "SET", op->lock_key, op->token, "NX", "PX", px };
    size_t lens[] = { 3, strlen(op->lock_key), strlen(op->token), 2, 2, (size_t)pl };
    rds_command(op->w->rds, on_lock, op, 6, argv, lens);
}

/* ----------------------------------------------------------------- reading */

static void on_get(redisReply *rep, void *priv)
{
    ca_op_t *op = priv;
    if (unexpected(rep, REDIS_REPLY_STRING)) {
        op->uncached = 1;
        submit_load(op);
        return;
    }
    if (rep->type == REDIS_REPLY_STRING) {
        metric_inc(&op->w->app->metrics->cache_hits);
        unlock(op);
        if (rep->len == 0)
            finish(op, CACHEASIDE_EMPTY, NULL, 0);
        else
            finish(op, CACHEASIDE_FOUND, rep->str, rep->len);
        return;
    }
    if (op->locked)
        submit_load(op);
    else
        take_lock(op);
}

static void step_get(ca_op_t *op)
{
    const char *argv[] = { "GET", op->key };
    size_t lens[] = { 3, strlen(op->key) };
    rds_command(op->w->rds, on_get, op, 2, argv, lens);
}

void cacheaside_get(worker_t *w, const cacheaside_spec_t *spec, const char *key,
                    const char *lock_key, cacheaside_load_fn load, void *load_arg,
                    cacheaside_cb cb, void *priv)
{
    if (strlen(key) >= KEY_MAX || strlen(lock_key) >= KEY_MAX) {
        cb(priv, CACHEASIDE_UNAVAILABLE, NULL, 0);
        return;
    }
    ca_op_t *op = xcalloc(1, sizeof *op);
    op->w = w;
    op->spec = spec;
    snprintf(op->key, sizeof op->key, "%s", key);
    snprintf(op->lock_key, sizeof op->lock_key, "%s", lock_key);
    op->load = load;
    op->load_arg = load_arg;
    op->cb = cb;
    op->priv = priv;
    op->wait_until_ms = clock_mono_ms() + CACHEASIDE_WAIT_MS;
    if (rnd_hex(op->token, 16) != 0) {
        free(op);
        cb(priv, CACHEASIDE_UNAVAILABLE, NULL, 0);
        return;
    }
    step_get(op);
}

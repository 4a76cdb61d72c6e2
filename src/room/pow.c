/* pow.c -- the bot gate's proof of work (format and rules in pow.h): challenges, their
 * check, the replay set in Redis and the per-voucher join rate behind the difficulty.
 *
 * The MAC is EVP_MAC's HMAC-SHA256 under the derived pow key, keyed once at start and
 * duplicated per call (EVP_MAC_CTX is not shared between threads while in use). The
 * solution's hash is SHA-256 over the challenge, ":" and the digits; the reference solver
 * hashes the constant prefix once and copies that state per try, hence the low-level
 * SHA256_* calls (deprecated in OpenSSL 3, as token.c explains). Nothing here is on the
 * grab path: challenges and joins are their own endpoints. */
#define OPENSSL_SUPPRESS_DEPRECATED
#include "room/pow.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include <hiredis/hiredis.h>
#include <openssl/core_names.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/params.h>
#include <openssl/sha.h>

#include "core/clock.h"
#include "core/xmem.h"
#include "redis/rcl_sync.h"
#include "redis/rds.h"

#define MAC_BYTES 16
#define RANDOM_BYTES 12
#define RATE_SLOTS 64             /* vouchers whose join rate one instance follows */
#define ROUTE_SLOTS 64            /* threads with a blocking connection (pow_verify) */
#define GATE_SLOTS 64             /* gated sale windows one instance keeps */
#define DERIVE_LABEL "seckill pow v1"

typedef struct pow_rate {
    int64_t voucher;              /* -1: free */
    double ewma;                  /* right solutions per second, as of last_ms */
    uint64_t last_ms;             /* monotonic */
} pow_rate_t;

typedef struct pow_route {
    pthread_t tid;
    int used;
    int open;
    rcl_sync_route_t r;
} pow_route_t;

typedef struct pow_window {
    int64_t voucher;              /* 0: free */
    int64_t begin_s, end_s;
} pow_window_t;

struct pow {
    EVP_MAC *mac;
    EVP_MAC_CTX *keyed;           /* read-only after pow_init: duplicated per use */
    pow_conf_t conf;
    char redis_url[512];
    int redis_timeout_ms;
    pthread_mutex_t mu;           /* rates and routes */
    pow_rate_t rates[RATE_SLOTS];
    pow_route_t routes[ROUTE_SLOTS];
    pow_window_t gates[GATE_SLOTS];
};

/* ----------------------------------------------------------------- set-up */

int pow_init(app_t *app, const uint8_t *key, size_t len, const pow_conf_t *conf, char *err,
             size_t errlen)
{
    uint8_t raw[32], derived[32];
    size_t dlen = 0;
    if (conf->min_bits < POW_MIN_BITS || conf->max_bits > POW_MAX_BITS ||
        conf->min_bits > conf->max_bits || !(conf->rate > 0) || conf->code_gate < 0 ||
        conf->code_gate > POW_CODE_GATE_ALWAYS) {
        snprintf(err, errlen, "pow: difficulty %d..%d bits or rate %g out of range",
                 conf->min_bits, conf->max_bits, conf->rate);
        return -1;
    }
    if (key == NULL) {
        if (getrandom(raw, sizeof raw, 0) != (ssize_t)sizeof raw) {
            snprintf(err, errlen, "pow: getrandom failed: %s", strerror(errno));
            return -1;
        }
        key = raw;
        len = sizeof raw;
    }
    if (EVP_Q_mac(NULL, "HMAC", NULL, "SHA256", NULL, key, len, (const uint8_t *)DERIVE_LABEL,
                  strlen(DERIVE_LABEL), derived, sizeof derived, &dlen) == NULL) {
        OPENSSL_cleanse(raw, sizeof raw);
        snprintf(err, errlen, "pow: cannot derive the key (OpenSSL)");
        return -1;
    }
    OPENSSL_cleanse(raw, sizeof raw);
    struct pow *p = xcalloc(1, sizeof *p);
    p->conf = *conf;
    snprintf(p->redis_url, sizeof p->redis_url, "%s", app->redis_url);
    p->redis_timeout_ms = app->cfg.redis_timeout_ms > 0 ? app->cfg.redis_timeout_ms : 1000;
    pthread_mutex_init(&p->mu, NULL);
    for (int i = 0; i < RATE_SLOTS; i++)
        p->rates[i].voucher = -1;
    OSSL_PARAM params[2] = {
        OSSL_PARAM_construct_utf8_string(OSSL_MAC_PARAM_DIGEST, (char *)"SHA256", 0),
        OSSL_PARAM_construct_end(),
    };
    p->mac = EVP_MAC_fetch(NULL, "HMAC", NULL);
    p->keyed = p->mac ? EVP_MAC_CTX_new(p->mac) : NULL;
    int ok = p->keyed && EVP_MAC_init(p->keyed, derived, dlen, params) == 1;
    OPENSSL_cleanse(derived, sizeof derived);
    app->pow = p;
    if (!ok) {
        pow_free(app);
        snprintf(err, errlen, "pow: cannot set up HMAC-SHA256 (OpenSSL)");
        return -1;
    }
    return 0;
}

void pow_free(app_t *app)
{
    struct pow *p = app->pow;
    if (p == NULL)
        return;
    for (int i = 0; i < ROUTE_SLOTS; i++)
        if (p->routes[i].open)
            rcl_sync_route_close(&p->routes[i].r);
    EVP_MAC_CTX_free(p->keyed);
    EVP_MAC_free(p->mac);
    pthread_mutex_destroy(&p->mu);
    free(p);
    app->pow = NULL;
}

/* ----------------------------------------------------------------- hashing */

static void hex_of(const uint8_t *b, size_t n, char *out)
{
    static const char hex[] = "0123456789abcdef";
    for (size_t i = 0; i < n; i++) {
        out[2 * i] = hex[b[i] >> 4];
        out[2 * i + 1] = hex[b[i] & 15];
    }
    out[2 * n] = '\0';
}

/* The challenge's mac over body[0..len) as 32 hex digits: 0, or -1 (OpenSSL). */
static int mac_hex(const struct pow *p, const char *body, size_t len, char out[2 * MAC_BYTES + 1])
{
    uint8_t mac[EVP_MAX_MD_SIZE];
    size_t mlen = 0;
    EVP_MAC_CTX *c = EVP_MAC_CTX_dup(p->keyed);
    int ok = c && EVP_MAC_update(c, (const uint8_t *)body, len) == 1 &&
             EVP_MAC_final(c, mac, &mlen, sizeof mac) == 1 && mlen >= MAC_BYTES;
    EVP_MAC_CTX_free(c);
    if (!ok)
        return -1;
    hex_of(mac, MAC_BYTES, out);
    return 0;
}

static int zero_bits(const uint8_t d[32])
{
    int bits = 0;
    for (int i = 0; i < 32; i++) {
        if (d[i] == 0) {
            bits += 8;
            continue;
        }
        return bits + __builtin_clz((unsigned)d[i]) - 24;
    }
    return bits;
}

int pow_zero_bits(const char *challenge, const char *solution)
{
    SHA256_CTX c;
    uint8_t d[32];
    SHA256_Init(&c);
    SHA256_Update(&c, challenge, strlen(challenge));
    SHA256_Update(&c, ":", 1);
    SHA256_Update(&c, solution, strlen(solution));
    SHA256_Final(d, &c);
    return zero_bits(d);
}

uint64_t pow_solve(const char *challenge, int difficulty, uint64_t start, uint64_t max_tries,
                   char *out, size_t n)
{
    SHA256_CTX prefix;
    SHA256_Init(&prefix);
    SHA256_Update(&prefix, challenge, strlen(challenge));
    SHA256_Update(&prefix, ":", 1);
    char digits[24];
    uint8_t d[32];
    for (uint64_t i = 0; i < max_tries; i++) {
        int len = snprintf(digits, sizeof digits, "%" PRIu64, start + i);
        SHA256_CTX c = prefix;
        SHA256_Update(&c, digits, (size_t)len);
        SHA256_Final(d, &c);
        if (zero_bits(d) >= difficulty) {
            if ((size_t)len >= n)
                return 0;
            memcpy(out, digits, (size_t)len + 1);
            return i + 1;
        }
    }
    return 0;
}

/* ----------------------------------------------------------------- join rate */

/* The voucher's slot (the least recently used one is taken over). Under p->mu. */
static pow_rate_t *rate_slot(struct pow *p, int64_t voucher_id)
{
    pow_rate_t *oldest = &p->rates[0];
    for (int i = 0; i < RATE_SLOTS; i++) {
        pow_rate_t *r = &p->rates[i];
        if (r->voucher == voucher_id)
            return r;
        if (r->voucher == -1 || (oldest->voucher != -1 && r->last_ms < oldest->last_ms))
            oldest = r;
    }
    oldest->voucher = voucher_id;
    oldest->ewma = 0;
    oldest->last_ms = clock_mono_ms();
    return oldest;
}

/* The rate decayed to now_ms; with add, one more right solution counted. Under p->mu. */
static double rate_at(pow_rate_t *r, uint64_t now_ms, int add)
{
    if (now_ms > r->last_ms) {
        r->ewma *= exp(-(double)(now_ms - r->last_ms) / POW_RATE_TAU_MS);
        r->last_ms = now_ms;
    }
    if (add)
        r->ewma += 1000.0 / POW_RATE_TAU_MS;
    return r->ewma;
}

static int bits_for(const pow_conf_t *c, double rate)
{
    int d = c->min_bits;
    if (rate > c->rate)
        d += (int)floor(log2(rate / c->rate)) + 1;
    return d > c->max_bits ? c->max_bits : d;
}

int pow_difficulty(const app_t *app, int64_t voucher_id)
{
    struct pow *p = app->pow;
    pthread_mutex_lock(&p->mu);
    double rate = rate_at(rate_slot(p, voucher_id), clock_mono_ms(), 0);
    pthread_mutex_unlock(&p->mu);
    return bits_for(&p->conf, rate);
}

void pow_used(const app_t *app, int64_t voucher_id)
{
    struct pow *p = app->pow;
    if (p == NULL)
        return;
    pthread_mutex_lock(&p->mu);
    rate_at(rate_slot(p, voucher_id), clock_mono_ms(), 1);
    pthread_mutex_unlock(&p->mu);
}

/* ----------------------------------------------------------------- the /user/code gate */

int pow_code_gate_mode(const char *name)
{
    static const char *const names[] = {"off", "sale", "always"};
    for (int i = 0; i < 3; i++)
        if (strcmp(name, names[i]) == 0)
            return i;
    return -1;
}

void pow_gate_sale(app_t *app, int64_t voucher_id, int64_t begin_s, int64_t end_s)
{
    struct pow *p = app->pow;
    if (p == NULL || voucher_id <= 0 || end_s <= begin_s)
        return;
    int64_t now = (int64_t)(clock_now_wall_ms() / 1000);
    pthread_mutex_lock(&p->mu);
    pow_window_t *slot = NULL;
    for (int i = 0; i < GATE_SLOTS; i++) {
        pow_window_t *g = &p->gates[i];
        if (g->voucher == voucher_id) {
            slot = g;
            break;
        }
        if (slot == NULL && (g->voucher == 0 || g->end_s <= now))
            slot = g;
    }
    if (slot)
        *slot = (pow_window_t){voucher_id, begin_s, end_s};
    pthread_mutex_unlock(&p->mu);
}

int pow_code_gate_on(const app_t *app, int64_t now_s)
{
    struct pow *p = app->pow;
    if (p == NULL || p->conf.code_gate == POW_CODE_GATE_OFF)
        return 0;
    if (p->conf.code_gate == POW_CODE_GATE_ALWAYS)
        return 1;
    int on = 0;
    pthread_mutex_lock(&p->mu);
    for (int i = 0; i < GATE_SLOTS && !on; i++) {
        const pow_window_t *g = &p->gates[i];
        on = g->voucher != 0 && g->begin_s <= now_s && now_s < g->end_s;
    }
    pthread_mutex_unlock(&p->mu);
    return on;
}

/* ----------------------------------------------------------------- challenges */

int pow_challenge(const app_t *app, int64_t user_id, int64_t voucher_id, char *out, size_t n,
                  int *difficulty)
{
    const struct pow *p = app->pow;
    uint8_t rnd[RANDOM_BYTES];
    char rhex[2 * RANDOM_BYTES + 1], mac[2 * MAC_BYTES + 1];
    if (p == NULL || n < POW_CHALLENGE_MAX || user_id < 0 || voucher_id < 0 ||
        getrandom(rnd, sizeof rnd, 0) != (ssize_t)sizeof rnd)
        return -1;
    hex_of(rnd, sizeof rnd, rhex);
    int d = pow_difficulty(app, voucher_id);
    int64_t expiry = (int64_t)(clock_now_wall_ms() / 1000) + POW_TTL_S;
    int len = snprintf(out, n, "v1.%" PRId64 ".%" PRId64 ".%" PRId64 ".%d.%s", user_id,
                       voucher_id, expiry, d, rhex);
    if (len < 0 || (size_t)len + 1 + 2 * MAC_BYTES >= n || mac_hex(p, out, (size_t)len, mac) < 0)
        return -1;
    snprintf(out + len, n - (size_t)len, ".%s", mac);
    *difficulty = d;
    return 0;
}

/* A decimal field of a challenge up to the next '.', into *v: the position after the dot,
 * or NULL (empty, not digits, a leading zero, too long). */
static const char *field(const char *s, int64_t *v)
{
    int64_t x = 0;
    const char *q = s;
    while (*q >= '0' && *q <= '9') {
        if (q - s >= 18)
            return NULL;
        x = x * 10 + (*q - '0');
        q++;
    }
    if (q == s || *q != '.' || (*s == '0' && q - s > 1))
        return NULL;
    *v = x;
    return q + 1;
}

static int lower_hex(const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f')))
            return 0;
    return 1;
}

static int solution_ok(const char *s)
{
    size_t n = s ? strlen(s) : 0;
    if (n == 0 || n > POW_SOLUTION_MAX)
        return 0;
    for (size_t i = 0; i < n; i++)
        if (s[i] < '0' || s[i] > '9')
            return 0;
    return 1;
}

int pow_check(const app_t *app, int64_t user_id, int64_t voucher_id, const char *challenge,
              const char *solution, uint64_t now_ms, char *replay_key, int64_t *ttl_ms)
{
    struct pow *p = app->pow;
    if (p == NULL || challenge == NULL || strncmp(challenge, "v1.", 3) != 0 ||
        strlen(challenge) >= POW_CHALLENGE_MAX || !solution_ok(solution))
        return -1;
    int64_t uid, vid, expiry, d;
    const char *q = challenge + 3;
    if (!(q = field(q, &uid)) || !(q = field(q, &vid)) || !(q = field(q, &expiry)) ||
        !(q = field(q, &d)))
        return -1;
    /* the random part, then the mac: exact lengths, nothing after */
    if (strlen(q) != 2 * RANDOM_BYTES + 1 + 2 * MAC_BYTES || q[2 * RANDOM_BYTES] != '.' ||
        !lower_hex(q, 2 * RANDOM_BYTES) || !lower_hex(q + 2 * RANDOM_BYTES + 1, 2 * MAC_BYTES))
        return -1;
    if (uid != user_id || vid != voucher_id || d < POW_MIN_BITS || d > POW_MAX_BITS)
        return -1;
    int64_t left_ms = expiry * 1000 - (int64_t)now_ms;
    if (left_ms <= 0 || left_ms > (int64_t)(POW_TTL_S + 60) * 1000)
        return -1;
    /* the cheap test first: a wrong answer costs one SHA-256, no MAC */
    if (pow_zero_bits(challenge, solution) < d)
        return -1;
    const char *given = q + 2 * RANDOM_BYTES + 1;
    size_t body = (size_t)(given - 1 - challenge);
    char mac[2 * MAC_BYTES + 1];
    if (mac_hex(p, challenge, body, mac) < 0 || CRYPTO_memcmp(mac, given, 2 * MAC_BYTES) != 0)
        return -1;
    snprintf(replay_key, POW_REPLAY_KEY_MAX, "seckill:pow:{%" PRId64 "}:%s", voucher_id, mac);
    *ttl_ms = left_ms;
    return 0;
}

/* ----------------------------------------------------------------- the replay set */

int pow_use_result(const redisReply *r)
{
    if (r == NULL || r->type == REDIS_REPLY_ERROR)
        return -3;
    if (r->type == REDIS_REPLY_STATUS)
        return 0;               /* OK: first use */
    return r->type == REDIS_REPLY_NIL ? -2 : -3;
}

/* SET key 1 NX PX ttl, as argv. */
typedef struct use_cmd {
    const char *argv[6];
    size_t len[6];
    char ttl[24];
} use_cmd_t;

static void use_cmd(use_cmd_t *c, const char *key, int64_t ttl_ms)
{
    snprintf(c->ttl, sizeof c->ttl, "%" PRId64, ttl_ms > 0 ? ttl_ms : 1);
    const char *a[6] = {"SET", key, "1", "NX", "PX", c->ttl};
    for (int i = 0; i < 6; i++) {
        c->argv[i] = a[i];
        c->len[i] = strlen(a[i]);
    }
}

typedef struct use_wait {
    const app_t *app;
    int64_t voucher_id;
    pow_use_cb cb;
    void *priv;
} use_wait_t;

static void on_use(struct redisReply *r, void *priv)
{
    use_wait_t w = *(use_wait_t *)priv;
    free(priv);
    int rc = pow_use_result(r);
    if (rc == 0)
        pow_used(w.app, w.voucher_id);
    w.cb(rc, w.priv);
}

void pow_use_async(const app_t *app, struct rds *rds, int64_t voucher_id, const char *replay_key,
                   int64_t ttl_ms, pow_use_cb cb, void *priv)
{
    use_cmd_t c;
    use_cmd(&c, replay_key, ttl_ms);
    use_wait_t *w = xcalloc(1, sizeof *w);
    *w = (use_wait_t){app, voucher_id, cb, priv};
    rds_command(rds, on_use, w, 6, c.argv, c.len);
}

/* This thread's blocking connection (opened on first use), or NULL. Under p->mu. */
static pow_route_t *route_of(struct pow *p)
{
    pthread_t me = pthread_self();
    pow_route_t *free_slot = NULL;
    for (int i = 0; i < ROUTE_SLOTS; i++) {
        pow_route_t *r = &p->routes[i];
        if (r->used && pthread_equal(r->tid, me))
            return r;
        if (!r->used && free_slot == NULL)
            free_slot = r;
    }
    if (free_slot) {
        free_slot->used = 1;
        free_slot->tid = me;
    }
    return free_slot;
}

int pow_verify(app_t *app, int64_t user_id, int64_t voucher_id, const char *challenge,
               const char *solution)
{
    struct pow *p = app->pow;
    char key[POW_REPLAY_KEY_MAX], err[256];
    int64_t ttl_ms = 0;
    if (pow_check(app, user_id, voucher_id, challenge, solution, clock_now_wall_ms(), key,
                  &ttl_ms) < 0)
        return -1;
    pthread_mutex_lock(&p->mu);
    pow_route_t *rt = route_of(p);
    pthread_mutex_unlock(&p->mu);
    if (rt == NULL)
        return -3;
    /* rt is this thread's alone from here on */
    if (!rt->open) {
        if (rcl_sync_route_open(p->redis_url, p->redis_timeout_ms, &rt->r, err, sizeof err) < 0)
            return -3;
        rt->open = 1;
    }
    redisContext *c = rcl_sync_route_key(&rt->r, key, err, sizeof err);
    use_cmd_t cmd;
    use_cmd(&cmd, key, ttl_ms);
    redisReply *r = c ? redisCommandArgv(c, 6, cmd.argv, cmd.len) : NULL;
    int rc = pow_use_result(r);
    if (rc == 0)
        pow_used(app, voucher_id);
    if (r)
        freeReplyObject(r);
    if (r == NULL || (c && c->err)) {
        /* a broken connection: the next call opens a new one */
        rcl_sync_route_close(&rt->r);
        rt->open = 0;
    }
    return rc;
}

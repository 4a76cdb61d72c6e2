/* rds_script.c -- the built-in scripts and their SHAs, shared by every worker (rds_script.h). */
#include "redis/rds_script.h"

#include <pthread.h>
#include <stdatomic.h>
#include <string.h>

#include <hiredis/hiredis.h>

#include "core/log.h"
#include "embedded.h"

/* One row per script_id_t. */
static struct {
    const char *name;
    const char *text;
} const script_tab[SCRIPT_COUNT] = {
    [SCRIPT_ADMIT] = { "admit", script_admit_lua },
    [SCRIPT_LOGIN_CODE] = { "login_code", script_login_code_lua },
    [SCRIPT_BOARD] = { "board", script_board_lua },
    [SCRIPT_ROOM] = { "room", script_room_lua },
};

static pthread_mutex_t sha_mu = PTHREAD_MUTEX_INITIALIZER;
static char sha_buf[SCRIPT_COUNT][RDS_SCRIPT_SHA_LEN + 1];
static atomic_int sha_known[SCRIPT_COUNT];

const char *rds_script_name(script_id_t s)
{
    return (unsigned)s < SCRIPT_COUNT ? script_tab[s].name : "?";
}

const char *rds_script_text(script_id_t s)
{
    return (unsigned)s < SCRIPT_COUNT ? script_tab[s].text : "";
}

const char *rds_script_sha(script_id_t s)
{
    if ((unsigned)s >= SCRIPT_COUNT)
        return NULL;
    if (!atomic_load_explicit(&sha_known[s], memory_order_acquire))
        return NULL;
    return sha_buf[s];
}

int rds_script_store(script_id_t s, const char *sha, size_t len)
{
    if ((unsigned)s >= SCRIPT_COUNT || len != RDS_SCRIPT_SHA_LEN)
        return -1;
    for (size_t i = 0; i < len; i++) {
        char ch = sha[i];
        if (!((ch >= '0' && ch <= '9') || (ch >= 'a' && ch <= 'f')))
            return -1;
    }
    if (atomic_load_explicit(&sha_known[s], memory_order_acquire)) {
        if (memcmp(sha_buf[s], sha, RDS_SCRIPT_SHA_LEN) != 0)
            log_error("redis: SCRIPT LOAD of %s returned %.40s, expected %s", script_tab[s].name,
                      sha, sha_buf[s]);
        return 0;
    }
    pthread_mutex_lock(&sha_mu);
    if (!atomic_load_explicit(&sha_known[s], memory_order_relaxed)) {
        memcpy(sha_buf[s], sha, RDS_SCRIPT_SHA_LEN);
        sha_buf[s][RDS_SCRIPT_SHA_LEN] = '\0';
        atomic_store_explicit(&sha_known[s], 1, memory_order_release);
    }
    pthread_mutex_unlock(&sha_mu);
    return 0;
}

int rds_script_noscript(const redisReply *reply)
{
    return reply != NULL && reply->type == REDIS_REPLY_ERROR && reply->len >= 8 &&
           memcmp(reply->str, "NOSCRIPT", 8) == 0;
}

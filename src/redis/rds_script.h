/* rds_script.h -- the built-in Lua scripts the workers' Redis clients run by SHA.
 *
 * Every node connection (rds_node.c) loads them on each (re)connect and again after a
 * NOSCRIPT; their SHAs, learned from the first SCRIPT LOAD reply any worker gets, are
 * process-wide and never change afterwards (the SHA1 of constant text). */
#ifndef SECKILL_RDS_SCRIPT_H
#define SECKILL_RDS_SCRIPT_H

#include <stddef.h>

struct redisReply;

#define RDS_SCRIPT_SHA_LEN 40

/* Built-in scripts. Index into rds_evalsha(). */
typedef enum {
    SCRIPT_ADMIT = 0,   /* src/sale/admit.lua: flash-sale admissions of one voucher */
    SCRIPT_LOGIN_CODE,  /* src/auth/login_code.lua: login codes and their wrong guesses */
    SCRIPT_BOARD,       /* src/server/board.lua: instance announcement, the sale board's data */
    SCRIPT_ROOM,        /* src/room/room.lua: a waiting room's join and poll */
    SCRIPT_COUNT
} script_id_t;

const char *rds_script_name(script_id_t s);   /* for logs: "admit" */
const char *rds_script_text(script_id_t s);   /* the Lua source */

/* The SHA1 (40 hex + NUL) of a built-in script, NULL before it is known. */
const char *rds_script_sha(script_id_t s);

/* Records a SCRIPT LOAD reply's SHA. Returns 0, or -1 if it is not a SHA. Thread-safe. */
int rds_script_store(script_id_t s, const char *sha, size_t len);

/* 1 if reply is Redis's NOSCRIPT error (the script cache lost the script). */
int rds_script_noscript(const struct redisReply *reply);

#endif

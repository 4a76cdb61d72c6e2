/* resp.h -- a Redis command in RESP, written straight into the caller's buffer.
 *
 * "*<argc>\r\n" then "$<len>\r\n<bytes>\r\n" per argument: what hiredis's
 * redis*CommandArgv would send, for redisAsyncFormattedCommand and
 * redisAppendFormattedCommand. hiredis formats with sdscatfmt, one growing sds per command:
 * on the hot paths (the workers' EVALSHA, the writer's XACK of a whole batch) that cost
 * more than everything else about sending the command. */
#ifndef SECKILL_RESP_H
#define SECKILL_RESP_H

#include <stddef.h>

/* An upper bound of what resp_put writes for these argument lengths. */
size_t resp_size(int argc, const size_t *lens);

/* Writes the command into out (resp_size bytes at least); returns its length. */
size_t resp_put(char *out, int argc, const char *const *argv, const size_t *lens);

/* The same in parts, for a command put together from several argument lists: the head
 * "*<argc>\r\n" of all argc arguments, then each list's arguments (resp_size bounds
 * both together). Each returns how many bytes it wrote. */
size_t resp_put_head(char *out, int argc);
size_t resp_put_args(char *out, int argc, const char *const *argv, const size_t *lens);

#endif

/* paykey.h -- the key payment notices are signed with (POST /pay/notify), and the check.
 *
 * x-pay-signature is the lowercase hex HMAC-SHA256 of the raw request body under this key.
 * The key comes from --pay-key-file; on the embedded default without one, from
 * <data-dir>/pay-key, made 0600 with 32 random bytes on the first start (read and made
 * through datadir.h like the admin token: never through a symlink, only trusted when it is
 * ours alone). Without a key every notice is refused. Set once at start, before the
 * workers run; read-only after. */
#ifndef SECKILL_PAYKEY_H
#define SECKILL_PAYKEY_H

#include <stddef.h>

struct config;

#define PAYKEY_MIN 16   /* characters: a shorter key is refused at start */

/* Takes cfg->pay_key (read from --pay-key-file), or on the embedded default the data
 * directory's pay-key. 0, or -1 with err set (a key too short, a file not ours). */
int paykey_init(const struct config *cfg, int embedded, char *err, size_t errlen);

/* 1 when sig (siglen bytes) is the lowercase hex HMAC-SHA256 of body under the key, in
 * constant time; 0 when not; -1 when no key is configured. */
int paykey_verify(const char *body, size_t len, const char *sig, size_t siglen);

#endif

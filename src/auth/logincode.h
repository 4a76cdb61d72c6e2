/* logincode.h -- login codes: issue one for a phone, check a submitted one.
 *
 * A code is 6 random digits kept LOGINCODE_TTL_S seconds at login:code:<phone> (the
 * course's key and shape). Wrong guesses are counted in Redis next to it, at
 * {login:code:<phone>}:fails (keys.h), by one script (src/auth/login_code.lua), so every
 * instance sees the same count and no in-memory table can forget it: the code dies after
 * LOGINCODE_MAX_FAILS wrong guesses, and after the first right one (one use). Issuing a
 * new code forgets the guesses made against the old one; how often that can happen is
 * what --rate-phone-code limits.
 *
 * Everything runs on the calling worker's thread and its Redis connection; the callback
 * runs exactly once, on that thread, possibly before the call returns (Redis down), so
 * call these as the handler's last step. Nothing is allocated that the caller owns. */
#ifndef SECKILL_LOGINCODE_H
#define SECKILL_LOGINCODE_H

#include <stddef.h>

struct worker;

#define LOGINCODE_LEN 6
#define LOGINCODE_TTL_S 120
#define LOGINCODE_MAX_FAILS 5

enum {
    LC_OK = 0,              /* issued and delivered / the right code, now used up */
    LC_WRONG = 1,           /* check: wrong, none, expired, used or invalidated */
    LC_UNAVAILABLE = -1,    /* Redis down or failed */
    LC_NO_RANDOM = -2,      /* issue: the kernel RNG failed */
    LC_UNDELIVERED = -3     /* issue: the delivery failed; nothing was stored */
};

typedef void (*logincode_cb)(void *priv, int status);

/* Makes a new code for phone (11 digits, already validated), delivers it, then stores
 * it. cb(priv, LC_OK | LC_UNAVAILABLE | LC_NO_RANDOM | LC_UNDELIVERED). */
void logincode_issue(struct worker *w, const char *phone, logincode_cb cb, void *priv);

/* Checks code (len bytes, any content) against phone's code and counts a wrong guess.
 * cb(priv, LC_OK | LC_WRONG | LC_UNAVAILABLE). */
void logincode_check(struct worker *w, const char *phone, const char *code, size_t len,
                     logincode_cb cb, void *priv);

#endif

/* logincode.h -- login codes: issue one for a phone, check a submitted one.
 *
 * A code is 6 random digits kept LOGINCODE_TTL_S seconds at login:code:<phone> (the
 * course's key and shape). Everything that guards it is kept in Redis next to it, in the
 * code's Cluster slot (keys.h), by one script (src/auth/login_code.lua), so every instance
 * sees the same counts and no in-memory table can be filled, evicted or forgotten:
 *
 *   - sending: the phone's code bucket (--rate-phone-code) and its codes per 24 hours
 *     (--code-day-cap), taken before a code is delivered;
 *   - guessing: the client that asked for the code (its owner: the one that received it)
 *     may make LOGINCODE_MAX_FAILS wrong guesses, after which the code dies; any other
 *     client LOGINCODE_MAX_FAILS, and all others together LOGINCODE_MAX_OTHER_FAILS, after
 *     which their guesses are not even compared. So nobody else can spend the owner's
 *     guesses (no targeted lockout), and at most LOGINCODE_MAX_FAILS +
 *     LOGINCODE_MAX_OTHER_FAILS wrong guesses ever reach one code. The code dies after its
 *     first right guess too (one use). A new code forgets every guess against the old one.
 *
 * Clients are the 64-bit keys of ratelimit_peer_key (IPv4, IPv6 /64, the forwarded client
 * behind a --trusted-proxy).
 *
 * Everything runs on the calling worker's thread and its Redis connection; the callback
 * runs exactly once, on that thread, possibly before the call returns (Redis down), so
 * call these as the handler's last step. Nothing is allocated that the caller owns. */
#ifndef SECKILL_LOGINCODE_H
#define SECKILL_LOGINCODE_H

#include <stddef.h>
#include <stdint.h>

struct worker;

#define LOGINCODE_LEN 6
#define LOGINCODE_TTL_S 120
#define LOGINCODE_MAX_FAILS 5         /* wrong guesses of the owner; of any other client */
#define LOGINCODE_MAX_OTHER_FAILS 10  /* wrong guesses of all clients but the owner */
#define LOGINCODE_MASK_BYTES 24       /* room for logincode_mask's text */

enum {
    LC_OK = 0,              /* issued and delivered / the right code, now used up */
    LC_WRONG = 1,           /* check: wrong, none, expired, used or invalidated */
    LC_UNAVAILABLE = -1,    /* Redis down or failed */
    LC_NO_RANDOM = -2,      /* issue: the kernel RNG failed */
    LC_UNDELIVERED = -3,    /* issue: the delivery failed; nothing was stored */
    LC_LIMITED = -4,        /* issue: the phone's code bucket is empty (--rate-phone-code) */
    LC_DAY_CAP = -5,        /* issue: the phone had --code-day-cap codes in 24 hours */
    LC_BUSY = -6            /* issue: --code-command-max commands are running; none started */
};

typedef void (*logincode_cb)(void *priv, int status);

/* Takes the phone's allowance, makes a new code for phone (11 digits, already validated)
 * asked for by client, delivers it, then stores it with client as its owner.
 * cb(priv, LC_OK | LC_UNAVAILABLE | LC_NO_RANDOM | LC_UNDELIVERED | LC_LIMITED |
 * LC_DAY_CAP | LC_BUSY). */
void logincode_issue(struct worker *w, const char *phone, uint64_t client, logincode_cb cb,
                     void *priv);

/* Checks code (len bytes, any content) submitted by client against phone's code and
 * counts a wrong guess. cb(priv, LC_OK | LC_WRONG | LC_UNAVAILABLE). */
void logincode_check(struct worker *w, const char *phone, uint64_t client, const char *code,
                     size_t len, logincode_cb cb, void *priv);

/* phone for a log line: its first 3 and last 4 characters around "****" (138****0000);
 * "****" when shorter than 8 or NULL. out has LOGINCODE_MASK_BYTES bytes. Returns out. */
const char *logincode_mask(const char *phone, char out[LOGINCODE_MASK_BYTES]);

#endif

/* pow.c -- STUB of the bot gate's proof-of-work challenges (pow.h). The gate engineer's
 * file replaces this one at merge; until then every challenge is "stub" at difficulty 0
 * and every solution verifies, so the waiting room's call sites can be built and tested. */
#include "room/pow.h"

#include <stdio.h>

int pow_challenge(const struct app *app, int64_t user_id, int64_t voucher_id, char *out,
                  size_t n, int *difficulty)
{
    (void)app;
    (void)user_id;
    (void)voucher_id;
    *difficulty = 0;
    return snprintf(out, n, "stub") > 0 ? 0 : -1;
}

int pow_verify(struct app *app, int64_t user_id, int64_t voucher_id, const char *challenge,
               const char *solution)
{
    (void)app;
    (void)user_id;
    (void)voucher_id;
    (void)challenge;
    (void)solution;
    return 0;
}

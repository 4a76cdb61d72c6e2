/* admin.h -- the x-admin-token guessing throttle.
 *
 * A wrong admin token costs the client one token of its --rate-ip-admin bucket (default
 * 5/m:5, exact per instance: one table behind a mutex; admin requests are rare). A client
 * whose bucket is spent gets 429 with Retry-After before its token is compared at all, so
 * right and wrong guesses look the same to it. Wrong tokens are counted
 * (seckill_admin_token_refused_total) and logged with the client's address, at most one
 * line per 10 s for the whole instance (with how many since the last line); the guessed
 * token itself is never logged. A request without the header is no guess and costs
 * nothing. */
#ifndef SECKILL_ADMIN_H
#define SECKILL_ADMIN_H

struct http_req;

/* 1 if this client may have its admin token compared now; 0 if it has guessed wrong too
 * often: then r->retry_after_s is set (the caller answers 429). */
int admin_allowed(struct http_req *r);

/* The token r carried was wrong: charge the client, count it, log (rate-limited). */
void admin_wrong(struct http_req *r);

#endif

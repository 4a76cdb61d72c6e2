/* test_room_poll.c -- the waiting room's answer figures (room.h): waitS and pollAfterMs.
 * pollAfterMs decides how many polls a room costs: a far place must not poll every few
 * seconds (200,000 buyers would cost Redis thousands of polls a second); after begin a
 * place due within a pass lifetime gets its pass at once, valid from its due moment
 * (room.lua), and polls no more; a place due later polls once, when it is due within one
 * lifetime. Simulated queues drained at the rate cost about one poll per buyer after begin
 * (two for a place due more than a lifetime after begin), each buyer's pass valid exactly
 * at its place's due moment -- never early, and late only for a buyer whose first poll
 * after begin came after it (by at most ROOM_POLL_MIN_MS, the least interval). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include <cmocka.h>

#include "room/room.h"

#define BEGIN_S 1700000000LL
#define TTL_MS 60000   /* the pass lifetime (passTtlS 60) */

/* The moment the place of rank (0-based) is due in a room of rate R (room.lua). */
static int64_t due_of(int64_t rank, int64_t rate)
{
    return BEGIN_S * 1000 + ((rank + 1) * 1000 + rate - 1) / rate;
}

/* The answer to a poll at now_ms of the buyer of rank (0-based) in a room of rate R, as
 * room.lua gives it to a buyer without a pass yet: admitted (a pass from now) once the
 * place is due, after begin a pass from the due moment when that is within TTL_MS. */
static room_state_t at(int64_t rank, int64_t rate, int64_t now_ms)
{
    room_state_t st = {.state = ROOM_WAITING, .rank = rank, .rate = rate, .begin_s = BEGIN_S,
                       .now_ms = now_ms, .ttl_ms = TTL_MS};
    if (now_ms >= BEGIN_S * 1000)
        st.released = (now_ms - BEGIN_S * 1000) * rate / 1000;
    if (rank < st.released) {
        st.state = ROOM_ADMITTED;
        st.from_ms = now_ms;
    } else if (now_ms >= BEGIN_S * 1000 && rate > 0 && due_of(rank, rate) - now_ms <= TTL_MS) {
        st.from_ms = due_of(rank, rate);
    }
    if (st.from_ms > 0)
        st.expires_ms = st.from_ms + TTL_MS;
    return st;
}

static void test_far_place_polls_when_due_within_a_lifetime(void **state)
{
    (void)state;
    /* R = 1,000/s, 200,000 ahead after begin: released in 200 s, no pass yet (due beyond
     * the 60 s lifetime); one poll once it is due within one, which gets the pass */
    room_state_t st = at(199999, 1000, BEGIN_S * 1000);
    assert_int_equal(st.from_ms, 0);
    assert_int_equal(room_wait_s(&st), 200);
    assert_int_equal(room_position(&st), 200000);
    int64_t next = room_poll_after_ms(&st);
    assert_int_equal(next, 200000 - TTL_MS + ROOM_POLL_DUE_SLACK_MS);
    st = at(199999, 1000, BEGIN_S * 1000 + next);
    assert_int_equal(st.state, ROOM_WAITING);
    assert_int_equal(st.from_ms, BEGIN_S * 1000 + 200000);
    /* an answer without the lifetime (0) waits for the due moment itself */
    st = at(199999, 1000, BEGIN_S * 1000);
    st.ttl_ms = 0;
    assert_int_equal(room_poll_after_ms(&st), 200000 + ROOM_POLL_DUE_SLACK_MS);
    /* ten million ahead: capped */
    st = at(9999999, 1000, BEGIN_S * 1000);
    assert_int_equal(room_poll_after_ms(&st), ROOM_POLL_WAIT_MAX_MS);
}

static void test_near_place_gets_a_pass_from_its_due_moment(void **state)
{
    (void)state;
    /* R = 3/s, rank 5, 500 ms after begin: one released, rank 5 passes at 2,000 ms: the
     * pass now, valid from then; an old client polling anyway polls at its start */
    room_state_t st = at(5, 3, BEGIN_S * 1000 + 500);
    assert_int_equal(st.released, 1);
    assert_int_equal(st.from_ms, BEGIN_S * 1000 + 2000);
    assert_int_equal(room_position(&st), 5);
    assert_int_equal(room_wait_s(&st), 2);
    assert_int_equal(room_poll_after_ms(&st), 1500 + ROOM_POLL_DUE_SLACK_MS);
    st = at(2999, 1000, BEGIN_S * 1000);
    assert_int_equal(room_poll_after_ms(&st), 3000 + ROOM_POLL_DUE_SLACK_MS);
    /* due within the least interval: the least interval */
    st = at(200, 1000, BEGIN_S * 1000 + 50);
    assert_int_equal(room_poll_after_ms(&st), ROOM_POLL_MIN_MS);
    /* a pass whose start is later than the place's due moment (the place moved up since
     * it was handed out): the start counts, and the place is at least 1 */
    st = at(10, 10, BEGIN_S * 1000 + 3000);
    st.state = ROOM_WAITING;
    st.from_ms = BEGIN_S * 1000 + 5000;
    assert_int_equal(room_position(&st), 1);
    assert_int_equal(room_wait_s(&st), 2);
    assert_int_equal(room_poll_after_ms(&st), 2000 + ROOM_POLL_DUE_SLACK_MS);
}

static void test_before_begin_counts_the_time_to_begin(void **state)
{
    (void)state;
    /* 10 s before begin, first in line: due 1 ms after begin; far, 7/8 of the wait */
    room_state_t st = at(0, 1000, BEGIN_S * 1000 - 10000);
    assert_int_equal(room_wait_s(&st), 11);
    assert_int_equal(room_poll_after_ms(&st), 10001 - 10001 / 8);
    /* near: one least interval early (the place may grow until begin) */
    st = at(0, 1000, BEGIN_S * 1000 - 3000);
    assert_int_equal(room_poll_after_ms(&st), 2001);
    st = at(499, 1000, BEGIN_S * 1000 - 1000);
    assert_int_equal(room_poll_after_ms(&st), ROOM_POLL_MIN_MS);
}

static void test_other_states(void **state)
{
    (void)state;
    room_state_t st = at(0, 1000, BEGIN_S * 1000 + 5000);
    assert_int_equal(st.state, ROOM_ADMITTED);
    assert_int_equal(room_wait_s(&st), 0);
    assert_int_equal(room_position(&st), 0);
    assert_int_equal(room_poll_after_ms(&st), ROOM_POLL_MIN_MS);
    st.state = ROOM_SOLD_OUT;
    assert_int_equal(room_poll_after_ms(&st), 30000);
    st.state = ROOM_NOT_QUEUED;
    assert_int_equal(room_poll_after_ms(&st), 30000);
    /* a broken answer (no rate) never divides by zero */
    st = at(10, 0, BEGIN_S * 1000);
    assert_int_equal(room_wait_s(&st), 0);
    assert_int_equal(room_poll_after_ms(&st), ROOM_POLL_MIN_MS);
}

/* Every buyer of a room of N at R/s, all queued at begin, polls as told from begin until
 * it holds a pass: polls per buyer, and how late each pass became valid after its place
 * was due (-1 if any was valid early). */
static void drain(int64_t n, int64_t rate, double *polls_per_buyer, int64_t *max_late_ms)
{
    int64_t polls = 0, late = 0;
    for (int64_t k = 0; k < n; k++) {
        int64_t t = BEGIN_S * 1000;
        room_state_t st;
        for (;;) {
            st = at(k, rate, t);
            polls++;
            if (st.from_ms > 0)
                break;
            t += room_poll_after_ms(&st);
        }
        int64_t d = st.from_ms - due_of(k, rate);
        if (d < 0) {
            late = -1;
            break;
        }
        if (d > late)
            late = d;
    }
    *polls_per_buyer = (double)polls / (double)n;
    *max_late_ms = late;
}

static void test_a_drained_room_costs_a_few_polls_per_buyer(void **state)
{
    (void)state;
    double ppb;
    int64_t late;
    /* 200,000 buyers at 1,000/s: drained in 200 s; the polls per second are R times ppb:
     * the first poll at begin (the pass for the places due in the first 60 s), a second
     * one lifetime before the place is due for the rest; every pass valid exactly when
     * its place is due */
    drain(200000, 1000, &ppb, &late);
    print_message("200,000 at 1,000/s: %.3f polls a buyer, the latest pass %lld ms late\n",
                  ppb, (long long)late);
    assert_true(ppb <= 1.71);
    assert_int_equal(late, 0);
    /* 50,000 at 1,000/s: all due within the lifetime, one poll each */
    drain(50000, 1000, &ppb, &late);
    print_message("50,000 at 1,000/s: %.3f polls a buyer\n", ppb);
    assert_true(ppb == 1.0);
    assert_int_equal(late, 0);
    /* 5,000 at 10/s: waits up to 500 s, polled every ROOM_POLL_WAIT_MAX_MS at most */
    drain(5000, 10, &ppb, &late);
    print_message("5,000 at 10/s: %.3f polls a buyer\n", ppb);
    assert_true(ppb <= 2.2);
    assert_int_equal(late, 0);
}

/* n buyers join in the span_ms before begin, in order, each drawing a uniform place score
 * (room.lua's shuffle), then poll as told until they hold a pass (R/s): the polls per
 * buyer after begin; how late the latest pass became valid after its final place was due
 * among the buyers whose first poll after begin came before that (*max_late_ms) and among
 * the others (*max_late_after_ms); -1 in both if a pass was ever valid early. A buyer's
 * rank at t before begin counts the joiners by then with a lower score; from begin it is
 * final. */
static void early(int n, int64_t rate, int64_t span_ms, double *after_per_buyer,
                  int64_t *max_late_ms, int64_t *max_late_after_ms)
{
    uint32_t *u = malloc((size_t)n * sizeof *u);
    uint32_t x = 12345;
    for (int i = 0; i < n; i++)
        u[i] = x = x * 1664525u + 1013904223u;
    int64_t after = 0, late = 0, late_after = 0, b = BEGIN_S * 1000;
    for (int j = 0; j < n; j++) {
        int64_t t = b - span_ms + (int64_t)j * span_ms / n, rank = -1, first = -1;
        room_state_t st;
        for (;;) {
            int joined = t >= b ? n : (int)((t - (b - span_ms)) * n / span_ms) + 1;
            rank = 0;
            for (int i = 0; i < joined && i < n; i++)
                rank += u[i] < u[j];
            st = at(rank, rate, t);
            if (t >= b) {
                after++;
                if (first < 0)
                    first = t;
            }
            if (st.from_ms > 0)
                break;
            t += room_poll_after_ms(&st);
        }
        int64_t due = due_of(rank, rate), d = st.from_ms - due;
        if (d < 0) {
            late = late_after = -1;
            break;
        }
        int64_t *worst = first >= 0 && first < due ? &late : &late_after;
        if (d > *worst)
            *worst = d;
    }
    free(u);
    *after_per_buyer = (double)after / n;
    *max_late_ms = late;
    *max_late_after_ms = late_after;
}

static void test_early_joiners_poll_about_once_after_begin(void **state)
{
    (void)state;
    double apb;
    int64_t late, late_after;
    /* 4,000 buyers joining in the 15 s before begin, 100/s: drained in 40 s after it */
    early(4000, 100, 15000, &apb, &late, &late_after);
    print_message("4,000 early joiners at 100/s: %.3f polls a buyer after begin, the latest "
                  "pass %lld ms late (first poll after begin before due), %lld ms (after)\n",
                  apb, (long long)late, (long long)late_after);
    assert_true(apb <= 1.01);
    /* a first poll after begin before the place is due gets the pass valid exactly then */
    assert_int_equal(late, 0);
    assert_true(late_after >= 0 && late_after <= ROOM_POLL_MIN_MS);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_far_place_polls_when_due_within_a_lifetime),
        cmocka_unit_test(test_near_place_gets_a_pass_from_its_due_moment),
        cmocka_unit_test(test_before_begin_counts_the_time_to_begin),
        cmocka_unit_test(test_other_states),
        cmocka_unit_test(test_a_drained_room_costs_a_few_polls_per_buyer),
        cmocka_unit_test(test_early_joiners_poll_about_once_after_begin),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

/* test_room_poll.c -- the waiting room's answer figures (room.h): waitS and pollAfterMs.
 * pollAfterMs decides how many polls a room costs: a far place must not poll every few
 * seconds (200,000 buyers would cost Redis thousands of polls a second); after begin a
 * place polls once, when it is due; and simulated queues drained at the rate cost about
 * one poll per buyer after begin besides the first, each buyer admitted at most
 * ROOM_POLL_MIN_MS after its place was (the least interval between two polls). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include <cmocka.h>

#include "room/room.h"

#define BEGIN_S 1700000000LL

/* The answer to a poll at now_ms of the buyer of rank (0-based) in a room of rate R. */
static room_state_t at(int64_t rank, int64_t rate, int64_t now_ms)
{
    room_state_t st = {.state = ROOM_WAITING, .rank = rank, .rate = rate, .begin_s = BEGIN_S,
                       .now_ms = now_ms};
    if (now_ms >= BEGIN_S * 1000)
        st.released = (now_ms - BEGIN_S * 1000) * rate / 1000;
    if (rank < st.released)
        st.state = ROOM_ADMITTED;
    return st;
}

static void test_far_place_polls_when_due(void **state)
{
    (void)state;
    /* R = 1,000/s, 200,000 ahead after begin: released in 200 s; one poll then */
    room_state_t st = at(199999, 1000, BEGIN_S * 1000);
    assert_int_equal(room_wait_s(&st), 200);
    assert_int_equal(room_position(&st), 200000);
    assert_int_equal(room_poll_after_ms(&st), 200000 + ROOM_POLL_DUE_SLACK_MS);
    /* ten million ahead: capped */
    st = at(9999999, 1000, BEGIN_S * 1000);
    assert_int_equal(room_poll_after_ms(&st), ROOM_POLL_WAIT_MAX_MS);
}

static void test_near_place_polls_when_due(void **state)
{
    (void)state;
    /* R = 3/s, rank 5, 500 ms after begin: one released, rank 5 passes at 2,000 ms */
    room_state_t st = at(5, 3, BEGIN_S * 1000 + 500);
    assert_int_equal(st.released, 1);
    assert_int_equal(room_position(&st), 5);
    assert_int_equal(room_wait_s(&st), 2);
    assert_int_equal(room_poll_after_ms(&st), 1500 + ROOM_POLL_DUE_SLACK_MS);
    st = at(2999, 1000, BEGIN_S * 1000);
    assert_int_equal(room_poll_after_ms(&st), 3000 + ROOM_POLL_DUE_SLACK_MS);
    /* due within the least interval: the least interval */
    st = at(200, 1000, BEGIN_S * 1000 + 50);
    assert_int_equal(room_poll_after_ms(&st), ROOM_POLL_MIN_MS);
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
 * admitted: polls per buyer, and how late each saw its pass after its place was due. */
static void drain(int64_t n, int64_t rate, double *polls_per_buyer, int64_t *max_late_ms)
{
    int64_t polls = 0, late = 0;
    for (int64_t k = 0; k < n; k++) {
        int64_t t = BEGIN_S * 1000;
        for (;;) {
            room_state_t st = at(k, rate, t);
            polls++;
            if (st.state == ROOM_ADMITTED)
                break;
            t += room_poll_after_ms(&st);
        }
        /* the place is due once floor((t - begin) * rate / 1000) > k */
        int64_t due = BEGIN_S * 1000 + ((k + 1) * 1000 + rate - 1) / rate;
        if (t - due > late)
            late = t - due;
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
     * the first poll at begin, the second when due */
    drain(200000, 1000, &ppb, &late);
    print_message("200,000 at 1,000/s: %.3f polls a buyer, the latest %lld ms late\n", ppb,
                  (long long)late);
    assert_true(ppb <= 2.0);
    assert_true(late <= ROOM_POLL_MIN_MS);
    /* 5,000 at 10/s: waits up to 500 s, polled every ROOM_POLL_WAIT_MAX_MS at most */
    drain(5000, 10, &ppb, &late);
    print_message("5,000 at 10/s: %.3f polls a buyer\n", ppb);
    assert_true(ppb <= 2.5);
    assert_true(late <= ROOM_POLL_MIN_MS);
}

/* n buyers join in the span_ms before begin, in order, each drawing a uniform place score
 * (room.lua's shuffle), then poll as told until admitted (R/s): the polls per buyer after
 * begin, and how late the last buyer saw its pass after its final place was due. A
 * buyer's rank at t before begin counts the joiners by then with a lower score; from
 * begin it is final. */
static void early(int n, int64_t rate, int64_t span_ms, double *after_per_buyer,
                  int64_t *max_late_ms)
{
    uint32_t *u = malloc((size_t)n * sizeof *u);
    uint32_t x = 12345;
    for (int i = 0; i < n; i++)
        u[i] = x = x * 1664525u + 1013904223u;
    int64_t after = 0, late = 0, b = BEGIN_S * 1000;
    for (int j = 0; j < n; j++) {
        int64_t t = b - span_ms + (int64_t)j * span_ms / n, rank = -1;
        for (;;) {
            int joined = t >= b ? n : (int)((t - (b - span_ms)) * n / span_ms) + 1;
            rank = 0;
            for (int i = 0; i < joined && i < n; i++)
                rank += u[i] < u[j];
            room_state_t st = at(rank, rate, t);
            if (t >= b)
                after++;
            if (st.state == ROOM_ADMITTED)
                break;
            t += room_poll_after_ms(&st);
        }
        int64_t due = b + ((rank + 1) * 1000 + rate - 1) / rate;
        if (t - due > late)
            late = t - due;
    }
    free(u);
    *after_per_buyer = (double)after / n;
    *max_late_ms = late;
}

static void test_early_joiners_poll_about_twice_after_begin(void **state)
{
    (void)state;
    double apb;
    int64_t late;
    /* 4,000 buyers joining in the 15 s before begin, 100/s: drained in 40 s after it */
    early(4000, 100, 15000, &apb, &late);
    print_message("4,000 early joiners at 100/s: %.3f polls a buyer after begin, the latest "
                  "%lld ms late\n", apb, (long long)late);
    assert_true(apb <= 2.0);
    assert_true(late <= ROOM_POLL_MIN_MS);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_far_place_polls_when_due),
        cmocka_unit_test(test_near_place_polls_when_due),
        cmocka_unit_test(test_before_begin_counts_the_time_to_begin),
        cmocka_unit_test(test_other_states),
        cmocka_unit_test(test_a_drained_room_costs_a_few_polls_per_buyer),
        cmocka_unit_test(test_early_joiners_poll_about_twice_after_begin),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

/* core/stall.h: a deadline that fires late (its process was stopped) moves
   by its lateness, within its budget; one that fires on time ends. */
#include "check.h"
#include "stall.h"

int main(void)
{
    struct stall_deadline d;

    /* On time, or late by less than a stop: over. */
    stall_deadline_set(&d, 1000, 5000);
    CHECK(stall_deadline_postpone(&d, 6000) == 0);
    stall_deadline_set(&d, 1000, 5000);
    CHECK(stall_deadline_postpone(&d, 6000 + STALL_LATE_MS) == 0);
    /* Early (the loop rounds its timers): the rest of the wait. */
    stall_deadline_set(&d, 1000, 5000);
    CHECK(stall_deadline_postpone(&d, 5999) == 1);
    /* Stopped for 3 s past the deadline: 3 s more, then over on time. */
    stall_deadline_set(&d, 1000, 5000);
    CHECK(stall_deadline_postpone(&d, 9000) == 3000);
    CHECK(d.due_ms == 12000 && d.left_ms == 2000);
    CHECK(stall_deadline_postpone(&d, 12000) == 0);
    /* Stopped again: only what is left of the budget, then nothing. */
    stall_deadline_set(&d, 0, 5000);
    CHECK(stall_deadline_postpone(&d, 9000) == 4000);
    CHECK(stall_deadline_postpone(&d, 13000 + 4000) == 1000);
    CHECK(d.left_ms == 0);
    CHECK(stall_deadline_postpone(&d, 30000) == 0);
    return check_result("test_stall");
}

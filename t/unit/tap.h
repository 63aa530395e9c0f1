/*
 * The TAP printer of the C unit tests in t/unit/: ok() prints one test
 * line, tap_done() the plan and the exit status.  One copy, included by
 * each test program.
 */

#ifndef SMCP_TAP_H
#define SMCP_TAP_H

#include <stdarg.h>
#include <stdio.h>


static int  tests, failed;


static void ok(int cond, const char *fmt, ...)
    __attribute__((format(printf, 2, 3), unused));


static void
ok(int cond, const char *fmt, ...)
{
    va_list  ap;

    tests++;

    if (!cond) {
        failed++;
    }

    printf("%sok %d - ", cond ? "" : "not ", tests);
    va_start(ap, fmt);
    vprintf(fmt, ap);
    va_end(ap);
    printf("\n");
}


/* the plan, at the end; main() returns this */
static int __attribute__((unused))
tap_done(void)
{
    printf("1..%d\n", tests);

    return failed ? 1 : 0;
}

#endif /* SMCP_TAP_H */

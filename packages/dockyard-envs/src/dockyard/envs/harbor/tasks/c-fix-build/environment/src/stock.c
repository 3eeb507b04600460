#include <stdio.h>
#include <stdlib.h>

#include "stock.h"

/* "12.50" for 1250; a ring of buffers so a few results can be used in one printf. */
static const char *format_money(long cents) {
    static char bufs[4][32];
    static int next;
    char *b = bufs[next++ % 4];
    snprintf(b, sizeof bufs[0], "%s%ld.%02ld", cents < 0 ? "-" : "", labs(cents) / 100,
             labs(cents) % 100);
    return b;
}

/* Held out: a test program that fails, to check that `make test` reports failure. */
#include <stdio.h>

#include "mini.h"

int main(void) {
    vec v;
    vec_init(&v);
    vec_push(&v, 2);
    if (vec_sum(&v) != 3) {
        printf("FAIL: expected failure of the held-out test\n");
        return 1;
    }
    return 0;
}

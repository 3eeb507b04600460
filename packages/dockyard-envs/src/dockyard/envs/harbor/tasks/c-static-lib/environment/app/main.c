/* bin/app WORD N... : the numbers' count, sum and max, then WORD reversed. */
#include <stdio.h>
#include <stdlib.h>

#include "mini.h"

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: %s WORD N...\n", argv[0]);
        return 2;
    }
    vec v;
    vec_init(&v);
    for (int i = 2; i < argc; i++)
        if (vec_push(&v, atoi(argv[i])) != 0) return 1;
    printf("count=%zu sum=%ld max=%d\n", v.len, vec_sum(&v), vec_max(&v));
    str_reverse(argv[1]);
    printf("%s\n", argv[1]);
    vec_free(&v);
    return 0;
}

#include <stdio.h>
#include <stdlib.h>
#include "ops.h"

int main(int argc, char **argv) {
    if (argc != 4) {
        fprintf(stderr, "usage: calc A OP B\n");
        return 2;
    }
    long a = strtol(argv[1], NULL, 10), b = strtol(argv[3], NULL, 10);
    printf("%ld\n", apply(a, argv[2][0], b));
    return 0;
}

#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv) {
    int bad = 0;
    if (argc < 2) { fprintf(stderr, "usage: collatz N...\n"); return 2; }
    for (int i = 1; i < argc; i++) {
        char *end;
        long long n = strtoll(argv[i], &end, 10);
        if (*end || end == argv[i] || n < 1 || n > 1000000000LL) {
            fprintf(stderr, "collatz: skipping '%s' (need 1..1000000000)\n", argv[i]);
            bad = 1;
            continue;
        }
        long long peak = n, steps = 0, x = n;
        while (x != 1) {
            x = (x % 2) ? 3 * x + 1 : x / 2;
            if (x > peak) peak = x;
            steps++;
        }
        printf("%lld: %lld steps, peak %lld\n", n, steps, peak);
    }
    return bad;
}

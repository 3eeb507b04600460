#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <ctype.h>

static int digit(int c) {
    if (isdigit(c)) return c - '0';
    if (isalpha(c)) return tolower(c) - 'a' + 10;
    return 99;
}

int main(int argc, char **argv) {
    if (argc != 4) { fprintf(stderr, "usage: basecv FROM TO NUMBER\n"); return 2; }
    int from = atoi(argv[1]), to = atoi(argv[2]);
    if (from < 2 || from > 36 || to < 2 || to > 36) {
        fprintf(stderr, "basecv: bases must be between 2 and 36\n");
        return 2;
    }
    const char *s = argv[3];
    int neg = 0;
    if (*s == '-') { neg = 1; s++; }
    if (!*s) { fprintf(stderr, "basecv: empty number\n"); return 1; }
    unsigned long long v = 0;
    for (const char *p = s; *p; p++) {
        int d = digit((unsigned char)*p);
        if (d >= from) { fprintf(stderr, "basecv: invalid digit '%c' for base %d\n", *p, from); return 1; }
        if (v > (~0ULL - d) / from) { fprintf(stderr, "basecv: number too large\n"); return 1; }
        v = v * from + d;
    }
    char buf[80];
    int n = 0;
    do { int d = v % to; buf[n++] = d < 10 ? '0' + d : 'a' + d - 10; v /= to; } while (v);
    if (neg) putchar('-');
    while (n) putchar(buf[--n]);
    putchar('\n');
    return 0;
}

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const int VAL[] = {1000, 900, 500, 400, 100, 90, 50, 40, 10, 9, 5, 4, 1};
static const char *SYM[] = {"M", "CM", "D", "CD", "C", "XC", "L", "XL", "X", "IX", "V", "IV", "I"};

static void to_roman(int n, char *out) {
    out[0] = 0;
    for (int i = 0; i < 13; i++)
        while (n >= VAL[i]) { strcat(out, SYM[i]); n -= VAL[i]; }
}

static int from_roman(const char *s) {
    int total = 0;
    const char *p = s;
    for (int i = 0; i < 13; i++) {
        size_t k = strlen(SYM[i]);
        while (strncmp(p, SYM[i], k) == 0) { total += VAL[i]; p += k; }
    }
    if (*p || total == 0) return -1;
    char back[64];
    to_roman(total, back);
    return strcmp(back, s) == 0 ? total : -1;
}

int main(int argc, char **argv) {
    if (argc == 3 && strcmp(argv[1], "-d") == 0) {
        int v = from_roman(argv[2]);
        if (v < 0) { fprintf(stderr, "roman: invalid numeral '%s'\n", argv[2]); return 1; }
        printf("%d\n", v);
        return 0;
    }
    if (argc != 2) { fprintf(stderr, "usage: roman N | roman -d NUMERAL\n"); return 2; }
    char *end;
    long n = strtol(argv[1], &end, 10);
    if (*end || end == argv[1]) { fprintf(stderr, "roman: not a number: '%s'\n", argv[1]); return 2; }
    if (n < 1 || n > 3999) { fprintf(stderr, "roman: %ld is out of range (1-3999)\n", n); return 1; }
    char out[64];
    to_roman((int)n, out);
    printf("%s\n", out);
    return 0;
}

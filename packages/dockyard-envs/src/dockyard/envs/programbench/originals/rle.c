#include <stdio.h>
#include <string.h>
#include <ctype.h>

static char line[65536];

static void encode(const char *s) {
    size_t n = strlen(s);
    for (size_t i = 0; i < n;) {
        size_t j = i;
        while (j < n && s[j] == s[i]) j++;
        printf("%zu%c", j - i, s[i]);
        i = j;
    }
}

static int decode(const char *s) {
    size_t n = strlen(s);
    for (size_t i = 0; i < n;) {
        if (!isdigit((unsigned char)s[i])) return 0;
        long count = 0;
        while (i < n && isdigit((unsigned char)s[i])) count = count * 10 + (s[i++] - '0');
        if (i >= n || count == 0 || count > 10000) return 0;
        for (long k = 0; k < count; k++) putchar(s[i]);
        i++;
    }
    return 1;
}

int main(int argc, char **argv) {
    int dec = argc > 1 && strcmp(argv[1], "-d") == 0;
    if (argc > 2 || (argc == 2 && !dec)) {
        fprintf(stderr, "usage: rle [-d] < input\n");
        return 2;
    }
    int lineno = 0;
    while (fgets(line, sizeof line, stdin)) {
        lineno++;
        size_t n = strlen(line);
        int nl = n > 0 && line[n - 1] == '\n';
        if (nl) line[n - 1] = 0;
        if (dec) {
            if (!decode(line)) {
                fflush(stdout);
                fprintf(stderr, "rle: malformed input at line %d\n", lineno);
                return 1;
            }
        } else {
            encode(line);
        }
        if (nl) putchar('\n');
    }
    return 0;
}

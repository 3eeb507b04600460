#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <ctype.h>

static int usage(void) {
    fprintf(stderr, "usage: rot [-n N] [-d]\n");
    return 2;
}

int main(int argc, char **argv) {
    int shift = 13, decode = 0;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "-d") == 0) {
            decode = 1;
        } else if (strcmp(argv[i], "-n") == 0) {
            if (i + 1 >= argc) return usage();
            char *end;
            long v = strtol(argv[++i], &end, 10);
            if (*end || end == argv[i] || v < 0 || v > 1000) {
                fprintf(stderr, "rot: invalid shift '%s'\n", argv[i]);
                return 2;
            }
            shift = (int)(v % 26);
        } else {
            fprintf(stderr, "rot: unknown option '%s'\n", argv[i]);
            return usage();
        }
    }
    if (decode) shift = (26 - shift) % 26;
    int c;
    while ((c = getchar()) != EOF) {
        if (islower(c)) c = 'a' + (c - 'a' + shift) % 26;
        else if (isupper(c)) c = 'A' + (c - 'A' + shift) % 26;
        putchar(c);
    }
    return 0;
}

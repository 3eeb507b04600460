#include <stdio.h>
#include <string.h>
#include <ctype.h>

int main(int argc, char **argv) {
    int fl = 0, fw = 0, fc = 0;
    for (int i = 1; i < argc; i++) {
        if (argv[i][0] != '-' || !argv[i][1]) {
            fprintf(stderr, "wcount: unexpected argument '%s'\n", argv[i]);
            return 2;
        }
        for (char *p = argv[i] + 1; *p; p++) {
            if (*p == 'l') fl = 1;
            else if (*p == 'w') fw = 1;
            else if (*p == 'c') fc = 1;
            else {
                fprintf(stderr, "wcount: unknown flag '-%c'\n", *p);
                return 2;
            }
        }
    }
    if (!fl && !fw && !fc) fl = fw = fc = 1;
    long lines = 0, words = 0, bytes = 0;
    int c, inword = 0;
    while ((c = getchar()) != EOF) {
        bytes++;
        if (c == '\n') lines++;
        if (isspace(c)) inword = 0;
        else if (!inword) { inword = 1; words++; }
    }
    int first = 1;
    if (fl) { printf("%ld", lines); first = 0; }
    if (fw) { printf(first ? "%ld" : " %ld", words); first = 0; }
    if (fc) { printf(first ? "%ld" : " %ld", bytes); }
    printf("\n");
    return 0;
}

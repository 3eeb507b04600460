#include <stdio.h>
#include <string.h>
#include <strings.h>

static char prev[8192], cur[8192];

int main(int argc, char **argv) {
    int icase = 0, dups = 0;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "-i") == 0) icase = 1;
        else if (strcmp(argv[i], "-d") == 0) dups = 1;
        else { fprintf(stderr, "uniqc: unknown option '%s'\n", argv[i]); return 2; }
    }
    long count = 0;
    while (fgets(cur, sizeof cur, stdin)) {
        size_t n = strlen(cur);
        if (n && cur[n - 1] == '\n') cur[n - 1] = 0;
        int same = count && (icase ? strcasecmp(cur, prev) == 0 : strcmp(cur, prev) == 0);
        if (same) { count++; continue; }
        if (count && (!dups || count > 1)) printf("%7ld %s\n", count, prev);
        strcpy(prev, cur);
        count = 1;
    }
    if (count && (!dups || count > 1)) printf("%7ld %s\n", count, prev);
    return 0;
}

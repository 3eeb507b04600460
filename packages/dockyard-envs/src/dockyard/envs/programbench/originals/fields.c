#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int want[101];

static int parse_list(const char *s) {
    char buf[256];
    if (strlen(s) >= sizeof buf) return 0;
    strcpy(buf, s);
    for (char *tok = strtok(buf, ","); tok; tok = strtok(NULL, ",")) {
        char *dash = strchr(tok, '-');
        int a, b;
        if (dash) { *dash = 0; a = atoi(tok); b = atoi(dash + 1); }
        else a = b = atoi(tok);
        if (a < 1 || b < a || b > 100) return 0;
        for (int i = a; i <= b; i++) want[i] = 1;
    }
    return 1;
}

int main(int argc, char **argv) {
    char delim = '\t';
    const char *list = NULL;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "-d") == 0 && i + 1 < argc) {
            if (strlen(argv[++i]) != 1) { fprintf(stderr, "fields: the delimiter must be one character\n"); return 2; }
            delim = argv[i][0];
        } else if (strcmp(argv[i], "-f") == 0 && i + 1 < argc) {
            list = argv[++i];
        } else {
            fprintf(stderr, "usage: fields [-d DELIM] -f LIST\n");
            return 2;
        }
    }
    if (!list) { fprintf(stderr, "fields: no field list given (-f)\n"); return 2; }
    if (!parse_list(list)) { fprintf(stderr, "fields: invalid field list '%s'\n", list); return 2; }
    char line[8192];
    while (fgets(line, sizeof line, stdin)) {
        size_t n = strlen(line);
        if (n && line[n - 1] == '\n') line[--n] = 0;
        int field = 1, printed = 0;
        char *start = line;
        for (char *p = line;; p++) {
            if (*p == delim || *p == 0) {
                char end = *p;
                if (field <= 100 && want[field]) {
                    if (printed) putchar(delim);
                    fwrite(start, 1, (size_t)(p - start), stdout);
                    printed = 1;
                }
                if (!end) break;
                field++;
                start = p + 1;
            }
        }
        putchar('\n');
    }
    return 0;
}

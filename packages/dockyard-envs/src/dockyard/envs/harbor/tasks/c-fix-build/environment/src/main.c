/* inventory [-v] FILE: value a stock list (lines "name,qty,price"; '#' comments, blank lines). */
#include <stdio.h>
#include <string.h>

#include "parse.h"
#include "report.h"
#include "stock.h"

#define MAX_ITEMS 1024

int main(int argc, char **argv) {
    int argi = 1;
    if (argi < argc && strcmp(argv[argi], "-v") == 0) {
        stock_verbose = 1;
        argi++;
    }
    if (argi != argc - 1) {
        fprintf(stderr, "usage: inventory [-v] FILE\n");
        return 2;
    }
    FILE *f = fopen(argv[argi], "r");
    if (!f) {
        perror(argv[argi]);
        return 2;
    }
    static struct item items[MAX_ITEMS];
    size_t n = 0;
    int bad = 0, lineno = 0;
    char line[256];
    while (fgets(line, sizeof line, f)) {
        lineno++;
        line[strcspn(line, "\r\n")] = '\0';
        if (line[0] == '\0' || line[0] == '#') continue;
        if (n == MAX_ITEMS || parse_line(line, lineno, &items[n]) != 0) {
            bad++;
            continue;
        }
        n++;
    }
    fclose(f);
    report_print(items, n);
    return bad ? 1 : 0;
}

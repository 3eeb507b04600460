#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "stock.h"

static int parse_price(const char *s, long *cents) {
    char *end;
    long whole = strtol(s, &end, 10);
    long frac = 0;
    if (end == s || whole < 0) return -1;
    if (*end == '.') {
        const char *f = end + 1;
        int digits = 0;
        while (isdigit((unsigned char)f[digits])) digits++;
        if (digits < 1 || digits > 2) return -1;
        frac = strtol(f, NULL, 10) * (digits == 1 ? 10 : 1);
        end = (char *)f + digits;
    }
    while (*end == ' ' || *end == '\n' || *end == '\r') end++;
    if (*end) return -1;
    *cents = whole * 100 + frac;
    return 0;
}

int parse_line(const char *line, struct item *out, int lineno) {
    const char *c1 = strchr(line, ',');
    const char *c2 = c1 ? strchr(c1 + 1, ',') : NULL;
    char *end;
    if (!c1 || !c2 || c1 == line || c1 - line > NAME_MAX_LEN) goto invalid;
    memcpy(out->name, line, c1 - line);
    out->name[c1 - line] = '\0';
    out->qty = strtol(c1 + 1, &end, 10);
    if (end == c1 + 1 || end != c2 || out->qty < 0) goto invalid;
    if (parse_price(c2 + 1, &out->price_cents) != 0) goto invalid;
    return 0;
invalid:
    fprintf(stderr, "line %d: invalid\n", lineno);
    return -1;
}

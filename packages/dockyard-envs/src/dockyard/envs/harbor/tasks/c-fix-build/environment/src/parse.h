#ifndef PARSE_H
#define PARSE_H

#include "stock.h"

/* Parse "name,qty,price" (price with up to two decimals, e.g. 2.5 or 2.50) into *out.
 * Returns 0, or -1 for an invalid line (after printing "line LINENO: invalid" to stderr). */
int parse_line(const char *line, int lineno, struct item *out);

#endif

#ifndef REPORT_H
#define REPORT_H

#include <stddef.h>

#include "stock.h"

/* One line per item, "NAME QTY x PRICE = VALUE", then "TOTAL VALUE" (and, with -v, "ITEMS N"). */
void report_print(const struct item *items, size_t n);

#endif

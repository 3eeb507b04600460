#include <stdio.h>

#include "report.h"

void report_print(const struct item *items, size_t n) {
    long total = 0;
    for (size_t i = 0; i < n; i++) {
        long v = item_value(&items[i]);
        printf("%s %ld x %s = %s\n", items[i].name, items[i].qty,
               format_money(items[i].price_cents), format_money(v));
        total += v;
    }
    printf("TOTAL %s\n", format_money(total));
    if (stock_verbose) printf("ITEMS %zu\n", n);
}

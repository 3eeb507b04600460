#ifndef STOCK_H
#define STOCK_H

#define NAME_MAX_LEN 31

struct item {
    char name[NAME_MAX_LEN + 1];
    long qty;
    long price_cents; /* unit price */
};

/* Set by -v: print a summary line after the report. */
int stock_verbose = 0;

/* The stock value of one item, in cents. */
inline long item_value(const struct item *it) {
    return it->qty * it->price_cents;
}

#endif

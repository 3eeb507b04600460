#ifndef MINI_H
#define MINI_H

#include <stddef.h>

/* A growable array of ints. */
typedef struct {
    int *data;
    size_t len, cap;
} vec;

void vec_init(vec *v);
int vec_push(vec *v, int x); /* 0 on success, -1 when out of memory */
long vec_sum(const vec *v);
int vec_max(const vec *v); /* undefined for an empty vec */
void vec_free(vec *v);

/* In-place string helpers. */
void str_reverse(char *s);
size_t str_count(const char *s, char c);

#endif

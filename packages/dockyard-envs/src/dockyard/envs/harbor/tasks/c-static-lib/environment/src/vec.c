#include <stdlib.h>

#include "mini.h"

void vec_init(vec *v) {
    v->data = NULL;
    v->len = v->cap = 0;
}

int vec_push(vec *v, int x) {
    if (v->len == v->cap) {
        size_t cap = v->cap ? 2 * v->cap : 4;
        int *data = realloc(v->data, cap * sizeof *data);
        if (!data) return -1;
        v->data = data;
        v->cap = cap;
    }
    v->data[v->len++] = x;
    return 0;
}

long vec_sum(const vec *v) {
    long s = 0;
    for (size_t i = 0; i < v->len; i++) s += v->data[i];
    return s;
}

int vec_max(const vec *v) {
    int m = v->data[0];
    for (size_t i = 1; i < v->len; i++)
        if (v->data[i] > m) m = v->data[i];
    return m;
}

void vec_free(vec *v) {
    free(v->data);
    vec_init(v);
}

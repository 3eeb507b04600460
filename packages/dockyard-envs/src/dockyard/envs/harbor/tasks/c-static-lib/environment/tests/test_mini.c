#include <stdio.h>
#include <string.h>

#include "mini.h"

static int failures;
#define CHECK(cond)                                                  \
    do {                                                             \
        if (!(cond)) {                                               \
            printf("FAIL %s:%d: %s\n", __FILE__, __LINE__, #cond);   \
            failures++;                                              \
        }                                                            \
    } while (0)

int main(void) {
    vec v;
    vec_init(&v);
    for (int i = 1; i <= 100; i++) CHECK(vec_push(&v, i) == 0);
    CHECK(v.len == 100);
    CHECK(vec_sum(&v) == 5050);
    CHECK(vec_max(&v) == 100);
    vec_free(&v);
    CHECK(v.len == 0 && v.data == NULL);

    char s[] = "static";
    str_reverse(s);
    CHECK(strcmp(s, "citats") == 0);
    CHECK(str_count("banana", 'a') == 3);
    CHECK(str_count("", 'a') == 0);

    if (failures) {
        printf("%d check(s) failed\n", failures);
        return 1;
    }
    printf("all tests passed\n");
    return 0;
}

#include <string.h>

#include "mini.h"

void str_reverse(char *s) {
    size_t n = strlen(s);
    for (size_t i = 0; i < n / 2; i++) {
        char t = s[i];
        s[i] = s[n - 1 - i];
        s[n - 1 - i] = t;
    }
}

size_t str_count(const char *s, char c) {
    size_t n = 0;
    for (; *s; s++) n += *s == c;
    return n;
}

/* A C reimplementation of `rot` (table-driven), for the fingerprint false-positive test. */
#include <stdio.h>
#include <string.h>
#include <stdlib.h>

int main(int argc, char **argv) {
    unsigned char map[256];
    int k = 13, back = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-d")) { back = 1; continue; }
        if (!strcmp(argv[i], "-n") && i + 1 < argc) { k = atoi(argv[++i]) % 26; continue; }
        fputs("usage: rot [-n N] [-d]\n", stderr);
        return 2;
    }
    if (back) k = (26 - k) % 26;
    for (int c = 0; c < 256; c++) map[c] = (unsigned char)c;
    for (int c = 0; c < 26; c++) {
        map['a' + c] = (unsigned char)('a' + (c + k) % 26);
        map['A' + c] = (unsigned char)('A' + (c + k) % 26);
    }
    char buf[4096];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, stdin)) > 0) {
        for (size_t j = 0; j < n; j++) buf[j] = (char)map[(unsigned char)buf[j]];
        fwrite(buf, 1, n, stdout);
    }
    return 0;
}

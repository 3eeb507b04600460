#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(int argc, char **argv) {
    long limit = -1;
    if (argc == 3 && strcmp(argv[1], "-n") == 0) {
        char *end;
        limit = strtol(argv[2], &end, 10);
        if (*end || limit < 0) { fprintf(stderr, "hexd: bad length '%s'\n", argv[2]); return 2; }
    } else if (argc != 1) {
        fprintf(stderr, "usage: hexd [-n LENGTH]\n");
        return 2;
    }
    unsigned char buf[16];
    long off = 0;
    for (;;) {
        size_t want = 16;
        if (limit >= 0 && limit - off < 16) want = (size_t)(limit - off);
        if (want == 0) break;
        size_t n = fread(buf, 1, want, stdin);
        if (n == 0) break;
        printf("%08lx ", off);
        for (size_t i = 0; i < 16; i++) {
            if (i == 8) putchar(' ');
            if (i < n) printf(" %02x", buf[i]); else printf("   ");
        }
        printf("  |");
        for (size_t i = 0; i < n; i++) putchar(buf[i] >= 32 && buf[i] < 127 ? buf[i] : '.');
        printf("|\n");
        off += (long)n;
    }
    printf("%08lx\n", off);
    return 0;
}

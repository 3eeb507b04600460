#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(int argc, char **argv) {
    long stack[256];
    int sp = 0;
    if (argc < 2) {
        fprintf(stderr, "usage: rpn TOKEN...\n");
        return 2;
    }
    for (int i = 1; i < argc; i++) {
        const char *t = argv[i];
        if (strlen(t) == 1 && strchr("+-*/%", t[0])) {
            if (sp < 2) { fprintf(stderr, "rpn: stack underflow at '%s'\n", t); return 1; }
            long b = stack[--sp], a = stack[--sp], r = 0;
            switch (t[0]) {
                case '+': r = a + b; break;
                case '-': r = a - b; break;
                case '*': r = a * b; break;
                case '/': case '%':
                    if (b == 0) { fprintf(stderr, "rpn: division by zero\n"); return 1; }
                    r = t[0] == '/' ? a / b : a % b; break;
            }
            stack[sp++] = r;
        } else if (strcmp(t, "dup") == 0) {
            if (sp < 1) { fprintf(stderr, "rpn: stack underflow at '%s'\n", t); return 1; }
            stack[sp] = stack[sp - 1]; sp++;
        } else {
            char *end;
            long v = strtol(t, &end, 10);
            if (*end || end == t) { fprintf(stderr, "rpn: bad token '%s'\n", t); return 2; }
            if (sp >= 256) { fprintf(stderr, "rpn: stack overflow\n"); return 1; }
            stack[sp++] = v;
        }
    }
    if (sp != 1) { fprintf(stderr, "rpn: %d values left on the stack\n", sp); return 1; }
    printf("%ld\n", stack[0]);
    return 0;
}

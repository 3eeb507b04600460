#include "ops.h"

long apply(long a, char op, long b) {
    switch (op) {
    case '+': return a + b;
    case '-': return a - b;
    case '*': return a * b;
    case '/': return b ? a / b : 0;
    }
    return 0;
}

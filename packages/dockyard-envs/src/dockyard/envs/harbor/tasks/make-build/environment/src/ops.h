long apply(long a, char op, long b);

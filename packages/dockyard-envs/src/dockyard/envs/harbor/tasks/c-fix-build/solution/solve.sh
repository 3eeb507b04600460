#!/bin/bash
cd /app
# stock.h: declare (not define) the flag; give format_money a prototype; a static inline helper
# (a plain C99 `inline` definition in a header emits no symbol: undefined reference at -O0)
sed -i 's|^int stock_verbose = 0;|extern int stock_verbose;|; s|^inline long item_value|static inline long item_value|' src/stock.h
sed -i 's|^#endif|/* "12.50" for 1250 (valid until three more calls). */\nconst char *format_money(long cents);\n\n#endif|' src/stock.h
# stock.c: the flag's one definition; format_money visible to report.c
sed -i 's|^static const char \*format_money|const char *format_money|' src/stock.c
printf '\nint stock_verbose = 0;\n' >> src/stock.c
# parse.c: include its own header, which exposes the swapped parameters
sed -i 's|^#include "stock.h"|#include "parse.h"|' src/parse.c
sed -i 's|^int parse_line(const char \*line, struct item \*out, int lineno)|int parse_line(const char *line, int lineno, struct item *out)|' src/parse.c
make clean >/dev/null
make

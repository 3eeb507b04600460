#!/bin/bash
cd /app
cat > Makefile <<'EOF'
CC = gcc
CFLAGS ?= -O2
CFLAGS += -Wall -Wextra
CPPFLAGS += -Iinclude
AR = ar

LIB := build/libmini.a
LIB_OBJS := build/vec.o build/strutil.o
HEADERS := include/mini.h

.PHONY: all test clean

all: bin/app

$(LIB): $(LIB_OBJS)
	rm -f $@
	$(AR) rcs $@ $^

build/%.o: src/%.c $(HEADERS) | build
	$(CC) $(CPPFLAGS) $(CFLAGS) -c $< -o $@

bin/app: app/main.c $(LIB) $(HEADERS) | bin
	$(CC) $(CPPFLAGS) $(CFLAGS) -o $@ $< -Lbuild -lmini

bin/test_mini: tests/test_mini.c $(LIB) $(HEADERS) | bin
	$(CC) $(CPPFLAGS) $(CFLAGS) -o $@ $< -Lbuild -lmini

test: bin/test_mini
	./bin/test_mini

build bin:
	mkdir -p $@

clean:
	rm -rf build bin
EOF
make

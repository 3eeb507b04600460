#!/bin/bash
cd /app
sed -i 's|^calc: src/main.o$|calc: src/main.o src/ops.o|; s|-o calc src/main.o$|-o calc src/main.o src/ops.o|' Makefile
make

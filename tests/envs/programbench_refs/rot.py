#!/usr/bin/env python3
"""A reimplementation of the `rot` task, written from its README and observed runs."""

import re
import sys


def usage():
    sys.stderr.write("usage: rot [-n N] [-d]\n")
    sys.exit(2)


args = sys.argv[1:]
shift, decode, i = 13, False, 0
while i < len(args):
    a = args[i]
    if a == "-d":
        decode = True
    elif a == "-n":
        if i + 1 >= len(args):
            usage()
        i += 1
        v = args[i]
        if not re.fullmatch(r"\s*[+-]?\d+", v) or not 0 <= int(v) <= 1000:
            sys.stderr.write(f"rot: invalid shift '{v}'\n")
            sys.exit(2)
        shift = int(v) % 26
    else:
        sys.stderr.write(f"rot: unknown option '{a}'\n")
        usage()
    i += 1
if decode:
    shift = (26 - shift) % 26
out = bytearray()
for b in sys.stdin.buffer.read():
    if 97 <= b <= 122:
        b = 97 + (b - 97 + shift) % 26
    elif 65 <= b <= 90:
        b = 65 + (b - 65 + shift) % 26
    out.append(b)
sys.stdout.buffer.write(bytes(out))

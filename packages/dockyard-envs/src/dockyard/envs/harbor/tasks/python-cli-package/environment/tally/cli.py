"""The command line: tally [--top N] [--ignore-case] FILE..."""

import argparse
import sys

from core import Counts, count_text


def main(argv=None):
    p = argparse.ArgumentParser(description="Count lines, words and the most frequent words.")
    p.add_argument(
        "--top", type=int, default=3, metavar="N", help="how many frequent words (default 3)"
    )
    p.add_argument("--ignore-case", action="store_true", help="count words case-insensitively")
    p.add_argument("files", nargs="+", metavar="FILE", help="files to read; - for stdin")
    a = p.parse_args(argv)
    if a.top < 0:
        p.error("--top must be >= 0")
    total = Counts()
    for name in a.files:
        try:
            if name == "-":
                text = sys.stdin.read()
            else:
                with open(name, encoding="utf-8") as f:
                    text = f.read()
        except OSError:
            p.error(f"cannot read {name}")
        total.add(count_text(text, a.ignore_case))
    print(f"lines {total.lines} words {total.words} chars {total.chars}")
    for word, n in total.top(a.top):
        print(f"{n} {word}")
    return 0

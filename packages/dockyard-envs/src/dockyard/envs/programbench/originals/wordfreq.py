import re
import sys


def main(argv):
    k, fold = 5, False
    i = 0
    while i < len(argv):
        if argv[i] == "-i":
            fold = True
        elif argv[i] == "-k" and i + 1 < len(argv) and argv[i + 1].isdigit():
            k = int(argv[i + 1])
            i += 1
        else:
            sys.stderr.write(f"wordfreq: bad argument {argv[i]!r}\nusage: wordfreq [-k K] [-i]\n")
            return 2
        i += 1
    counts = {}
    for w in re.findall(r"[A-Za-z']+", sys.stdin.read()):
        w = w.lower() if fold else w
        counts[w] = counts.get(w, 0) + 1
    if not counts:
        sys.stderr.write("wordfreq: no words\n")
        return 1
    for w, c in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[:k]:
        print(f"{c:<4d} {w}")
    return 0


sys.exit(main(sys.argv[1:]))

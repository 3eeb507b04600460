import sys


def main(argv):
    delim = ","
    if len(argv) == 2 and argv[0] == "-d" and len(argv[1]) == 1:
        delim = argv[1]
    elif argv:
        sys.stderr.write("usage: transpose [-d C] < table\n")
        return 2
    rows = [line.split(delim) for line in sys.stdin.read().splitlines()]
    if not rows:
        return 0
    width = max(len(r) for r in rows)
    for j in range(width):
        print(delim.join(r[j] if j < len(r) else "" for r in rows))
    return 0


sys.exit(main(sys.argv[1:]))

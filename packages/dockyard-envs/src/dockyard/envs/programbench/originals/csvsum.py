import csv
import sys


def num(s):
    try:
        return int(s)
    except ValueError:
        return float(s)


def main(argv):
    col = None
    if len(argv) == 2 and argv[0] == "-c":
        col = argv[1]
    elif argv:
        sys.stderr.write("usage: csvsum [-c COLUMN] < file.csv\n")
        return 2
    rows = list(csv.reader(sys.stdin))
    if not rows:
        sys.stderr.write("csvsum: empty input\n")
        return 1
    header, body = rows[0], rows[1:]
    if col is not None and col not in header:
        sys.stderr.write(f"csvsum: no column {col!r}\n")
        return 1
    for j, name in enumerate(header):
        if col is not None and name != col:
            continue
        try:
            vals = [num(r[j]) for r in body if j < len(r) and r[j] != ""]
        except ValueError:
            if col is not None:
                sys.stderr.write(f"csvsum: column {name!r} is not numeric\n")
                return 1
            continue
        total = sum(vals)
        print(f"{name}={round(total, 6) if isinstance(total, float) else total}")
    return 0


sys.exit(main(sys.argv[1:]))

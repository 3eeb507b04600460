import sys


def main(argv):
    summary = argv == ["-s"]
    if argv and not summary:
        sys.stderr.write("usage: palin [-s] < lines\n")
        return 2
    yes = total = 0
    for line in sys.stdin.read().splitlines():
        s = [c.lower() for c in line if c.isalnum()]
        if not s:
            continue
        total += 1
        ok = s == s[::-1]
        yes += ok
        if not summary:
            print(("yes" if ok else "no ") + " " + line.strip())
    if summary:
        print(f"{yes} of {total}")
    return 0 if yes else 1


sys.exit(main(sys.argv[1:]))

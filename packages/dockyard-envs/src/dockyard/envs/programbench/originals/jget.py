import json
import sys


def main(argv):
    if len(argv) != 1:
        sys.stderr.write("usage: jget PATH < file.json\n")
        return 2
    try:
        doc = json.loads(sys.stdin.read())
    except ValueError:
        sys.stderr.write("jget: invalid JSON\n")
        return 2
    cur = doc
    for part in [p for p in argv[0].split(".") if p]:
        if (
            isinstance(cur, list)
            and part.lstrip("-").isdigit()
            and -len(cur) <= int(part) < len(cur)
        ):
            cur = cur[int(part)]
        elif isinstance(cur, dict) and part in cur:
            cur = cur[part]
        else:
            sys.stderr.write(f"jget: no such path: {argv[0]}\n")
            return 1
    if isinstance(cur, str):
        print(cur)
    else:
        print(json.dumps(cur, sort_keys=True, separators=(",", ":")))
    return 0


sys.exit(main(sys.argv[1:]))

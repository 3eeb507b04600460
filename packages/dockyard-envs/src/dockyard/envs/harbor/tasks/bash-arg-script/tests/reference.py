"""The held-out reference behaviour of ticket.sh: (stdout, stderr, exit status) for an argv."""

import re

USAGE = "usage: ticket.sh [-h] [-u] [-n COUNT] [-p PREFIX] [-w WIDTH] [--] START"


def _err(msg: str, rc: int = 2) -> tuple[str, str, int]:
    return "", f"ticket.sh: {msg}\n", rc


def ticket(args: list[str]) -> tuple[str, str, int]:
    opts = {"n": "1", "p": "TKT", "w": "4"}
    upper = False
    i = 0
    while i < len(args):
        a = args[i]
        if a == "--":
            i += 1
            break
        if not a.startswith("-") or a == "-":
            break
        j = 1
        while j < len(a):
            c = a[j]
            if c == "h":
                return USAGE + "\n", "", 0
            if c == "u":
                upper = True
                j += 1
            elif c in "npw":
                if j + 1 < len(a):
                    opts[c] = a[j + 1 :]
                elif i + 1 < len(args):
                    i += 1
                    opts[c] = args[i]
                else:
                    return _err(f"option -{c} needs a value")
                break
            else:
                return _err(f"unknown option: -{c}")
        i += 1
    operands = args[i:]
    n, w, p = opts["n"], opts["w"], opts["p"]
    if not re.fullmatch(r"[0-9]{1,4}", n) or not 1 <= int(n) <= 1000:
        return _err(f"invalid count: {n}")
    if not re.fullmatch(r"[0-9]{1,2}", w) or not 1 <= int(w) <= 12:
        return _err(f"invalid width: {w}")
    if not re.fullmatch(r"[A-Za-z][A-Za-z0-9]*", p):
        return _err(f"invalid prefix: {p}")
    if not operands:
        return _err("missing START")
    if len(operands) > 1:
        return _err("too many arguments")
    s = operands[0]
    if not re.fullmatch(r"[0-9]{1,12}", s):
        return _err(f"invalid start: {s}")
    start, count, width = int(s), int(n), int(w)
    if upper:
        p = p.upper()
    last = start + count - 1
    if len(str(last)) > width:
        return _err(f"{last} does not fit in {width} digits", 3)
    return "".join(f"{p}-{k:0{width}d}\n" for k in range(start, last + 1)), "", 0

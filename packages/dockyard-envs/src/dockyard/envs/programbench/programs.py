"""The programs behind the shipped cleanroom tasks: source, documentation, input generator.

Each :class:`Program` names a source file of ``originals/`` (C, built with the system ``gcc``;
or Python, packed as a byte-code-only zipapp), the documentation the agent sees, and a
generator of inputs ``rng -> (argv, stdin)``. The builder (``build.py``) runs the original on
generated inputs and records what it did; the sources never reach a workspace.

To add a program: a file in ``originals/``, a row in :data:`PROGRAMS`, then
``python -m dockyard.envs.programbench.build``.
"""

from __future__ import annotations

import json
import random
import string
from collections.abc import Callable
from dataclasses import dataclass

Case = tuple[list[str], str]
"""One input: ``(argv without the program name, stdin text)``."""


@dataclass(frozen=True)
class Program:
    name: str
    source: str
    """File name under ``originals/`` (``.c`` or ``.py``)."""
    doc: str
    """The documentation shipped beside the executable (``README.md``)."""
    gen: Callable[[random.Random], Case]


def _words(rng: random.Random, n: int, vocab: list[str] | None = None) -> list[str]:
    vocab = vocab or ["the", "cat", "Sat", "on", "mat", "a", "dog", "ran", "The", "it's", "sun"]
    return [rng.choice(vocab) for _ in range(n)]


def _text(rng: random.Random) -> str:
    lines = [" ".join(_words(rng, rng.randint(0, 8))) for _ in range(rng.randint(0, 5))]
    pun = rng.choice(["", "!", ", ok.", " 42", "\t-x-"])
    return "\n".join(lines) + pun + rng.choice(["", "\n"])


def _gen_rot(rng: random.Random) -> Case:
    argv: list[str] = []
    r = rng.random()
    if r < 0.4:
        argv = ["-n", str(rng.randint(0, 60))]
    elif r < 0.5:
        argv = ["-n", rng.choice(["x", "-3", "2000", ""])]
    elif r < 0.55:
        argv = [rng.choice(["-q", "--help", "-n"])]
    if rng.random() < 0.4:
        argv.append("-d")
    return argv, _text(rng)


def _gen_wcount(rng: random.Random) -> Case:
    flags = rng.choice(
        [[], ["-l"], ["-w"], ["-c"], ["-lw"], ["-c", "-l"], ["-wc", "-l"], ["-x"], ["x"]]
    )
    return flags, _text(rng) + rng.choice(["", "  \n\n", "\tend"])


def _gen_rle(rng: random.Random) -> Case:
    if rng.random() < 0.5:
        lines = ["".join(rng.choice("aab b-") * rng.randint(1, 4) for _ in range(rng.randint(0, 6)))
                 for _ in range(rng.randint(1, 4))]  # fmt: skip
        return [], "\n".join(lines) + rng.choice(["", "\n"])
    good = ["".join(f"{rng.randint(1, 12)}{rng.choice('xyz .')}" for _ in range(rng.randint(1, 5)))
            for _ in range(rng.randint(1, 3))]  # fmt: skip
    if rng.random() < 0.3:
        good.append(rng.choice(["3", "a2b", "0x", "12"]))
    argv = ["-d"] if rng.random() < 0.95 else ["-d", "-x"]
    return argv, "\n".join(good) + "\n"


def _gen_rpn(rng: random.Random) -> Case:
    toks: list[str] = []
    depth = 0
    for _ in range(rng.randint(0, 9)):
        if depth >= 2 and rng.random() < 0.5:
            toks.append(rng.choice("+-*/%"))
            depth -= 1
        elif depth >= 1 and rng.random() < 0.1:
            toks.append("dup")
            depth += 1
        else:
            toks.append(str(rng.randint(-20, 50)))
            depth += 1
    r = rng.random()
    if r < 0.1:
        toks.append(rng.choice(["x", "1.5", "++"]))
    elif r < 0.2:
        toks += ["0", "/"]
    return toks, ""


def _gen_roman(rng: random.Random) -> Case:
    r = rng.random()
    if r < 0.45:
        return [str(rng.choice([rng.randint(1, 3999), 0, 4000, -5, rng.randint(1, 50)]))], ""
    if r < 0.9:
        numeral = rng.choice(["XIV", "MCMXCIV", "IIII", "IC", "MMXXVI", "XLII", "VX", "", "CDXLIV"])
        return ["-d", numeral], ""
    return rng.choice([[], ["abc"], ["1", "2"]]), ""


def _gen_basecv(rng: random.Random) -> Case:
    src = rng.choice([2, 8, 10, 16, 36, rng.randint(2, 36)])
    dst = rng.choice([2, 10, 16, 36, rng.randint(2, 36)])
    digits = (string.digits + string.ascii_lowercase)[:src]
    num = "".join(rng.choice(digits) for _ in range(rng.randint(1, 10)))
    r = rng.random()
    if r < 0.1:
        num = "-" + num
    elif r < 0.2:
        num += rng.choice(["z", "!", "9"])
    elif r < 0.25:
        src = rng.choice([1, 40])
    argv = [str(src), str(dst), num]
    if rng.random() < 0.05:
        argv = argv[:2]
    return argv, ""


def _gen_uniqc(rng: random.Random) -> Case:
    vocab = ["apple", "Apple", "pear", "", "kiwi", "KIWI"]
    lines = [rng.choice(vocab) for _ in range(rng.randint(0, 10))]
    flags = rng.choice([[], ["-i"], ["-d"], ["-i", "-d"], ["-c"]])
    return flags, "\n".join(lines) + rng.choice(["\n", ""])


def _gen_hexd(rng: random.Random) -> Case:
    data = "".join(rng.choice(string.printable) for _ in range(rng.randint(0, 60)))
    flags = rng.choice([[], [], ["-n", str(rng.randint(0, 40))], ["-n", "x"], ["-v"]])
    return flags, data


def _gen_fields(rng: random.Random) -> Case:
    delim = rng.choice([",", ":", "\t"])
    rows = [delim.join(rng.choice(["a", "bb", "", "c1", "x y"]) for _ in range(rng.randint(1, 5)))
            for _ in range(rng.randint(1, 4))]  # fmt: skip
    spec = rng.choice(["1", "2", "1,3", "2-4", "3-", "1,1", "5", "0", "4-2", "1-2,4"])
    argv = ["-f", spec] if delim == "\t" and rng.random() < 0.5 else ["-d", delim, "-f", spec]
    if rng.random() < 0.08:
        argv = rng.choice([["-d", "ab", "-f", "1"], ["-d", ","], ["-z"]])
    return argv, "\n".join(rows) + "\n"


def _gen_collatz(rng: random.Random) -> Case:
    nums = [str(rng.choice([rng.randint(1, 100), rng.randint(1, 10**6), 27, 1])) for _ in
            range(rng.randint(0, 4))]  # fmt: skip
    if rng.random() < 0.2:
        nums.insert(rng.randint(0, len(nums)), rng.choice(["0", "-4", "abc", "1e3"]))
    return nums, ""


def _gen_wordfreq(rng: random.Random) -> Case:
    argv = rng.choice(
        [[], ["-i"], ["-k", str(rng.randint(1, 8))], ["-k", "3", "-i"], ["-k"], ["-z"]]
    )
    return argv, _text(rng) if rng.random() < 0.9 else "123 456\n"


def _gen_jget(rng: random.Random) -> Case:
    doc = {
        "name": rng.choice(["ada", "bo", "cy"]),
        "tags": _words(rng, rng.randint(0, 3)),
        "meta": {"n": rng.randint(-5, 99), "ok": rng.random() < 0.5, "z": None,
                 "pts": [rng.randint(0, 9) for _ in range(rng.randint(0, 3))]},
    }  # fmt: skip
    path = rng.choice(["name", "tags", "tags.0", "tags.-1", "meta", "meta.n", "meta.ok",
                       "meta.z", "meta.pts.1", "missing", "name.x", "", "tags.7"])  # fmt: skip
    text = json.dumps(doc, indent=rng.choice([None, 2]))
    if rng.random() < 0.08:
        text = text[:-1]
    argv = [path] if rng.random() < 0.95 else []
    return argv, text


def _gen_csvsum(rng: random.Random) -> Case:
    cols = ["id", "qty", "price", "note"]
    rows = [",".join(cols)]
    for _ in range(rng.randint(0, 5)):
        rows.append(",".join([str(rng.randint(1, 99)), str(rng.randint(-3, 20)),
                              rng.choice(["1.5", "2", "0.25", "", "3.125"]),
                              rng.choice(["x", "y z", ""])]))  # fmt: skip
    argv = rng.choice(
        [[], [], ["-c", "qty"], ["-c", "price"], ["-c", "note"], ["-c", "nope"], ["-q"]]
    )
    return argv, "\n".join(rows) + "\n" if rng.random() < 0.95 else ""


def _gen_palin(rng: random.Random) -> Case:
    pool = ["racecar", "A man, a plan, a canal: Panama", "hello", "No lemon, no melon", "",
            "abca", "Was it a car or a cat I saw?", "x", "  12321 "]  # fmt: skip
    lines = [rng.choice(pool) for _ in range(rng.randint(0, 6))]
    argv = rng.choice([[], [], ["-s"], ["-v"]])
    return argv, "\n".join(lines) + "\n"


def _gen_transpose(rng: random.Random) -> Case:
    delim = rng.choice([",", ";", " "])
    rows = [delim.join(rng.choice(["1", "22", "abc", ""]) for _ in range(rng.randint(1, 4)))
            for _ in range(rng.randint(0, 4))]  # fmt: skip
    argv = [] if delim == "," and rng.random() < 0.5 else ["-d", delim]
    if rng.random() < 0.06:
        argv = ["-d", ";;"]
    return argv, "\n".join(rows) + ("\n" if rows else "")


PROGRAMS: list[Program] = [
    Program(
        "rot",
        "rot.c",
        "# rot\n\nRotate the letters of standard input.\n\n"
        "    rot [-n N] [-d]\n\n* `-n N` shift by N (0-1000, default 13)\n"
        "* `-d` rotate back (decode)\n\nOther characters pass through unchanged. "
        "Exit 2 on a bad option or shift.\n",
        _gen_rot,
    ),
    Program(
        "wcount",
        "wcount.c",
        "# wcount\n\nCount lines, words and bytes of standard "
        "input.\n\n    wcount [-l] [-w] [-c]\n\nFlags may be combined (`-lw`). With none, "
        "all three are printed, in the order lines, words, bytes, on one line.\n",
        _gen_wcount,
    ),
    Program(
        "rle",
        "rle.c",
        "# rle\n\nRun-length encode each line of standard input "
        "(`aaab` -> `3a1b`), or decode with `-d`.\n\n    rle [-d] < input\n\nDecoding stops "
        "with exit status 1 at the first malformed line.\n",
        _gen_rle,
    ),
    Program(
        "rpn",
        "rpn.c",
        "# rpn\n\nEvaluate an integer expression in reverse Polish "
        "notation given as arguments.\n\n    rpn 3 4 + 2 '*'\n\nOperators: `+ - * / %` and "
        "`dup`. Errors go to standard error with exit status 1 or 2.\n",
        _gen_rpn,
    ),
    Program(
        "roman",
        "roman.c",
        "# roman\n\nConvert between integers and Roman numerals.\n\n"
        "    roman N           # 1..3999\n    roman -d NUMERAL  # back to decimal\n\n"
        "Only canonical numerals are accepted.\n",
        _gen_roman,
    ),
    Program(
        "basecv",
        "basecv.c",
        "# basecv\n\nConvert an integer between bases 2 to 36.\n\n"
        "    basecv FROM TO NUMBER\n\nDigits above 9 are letters; output is lowercase. A "
        "leading `-` is kept.\n",
        _gen_basecv,
    ),
    Program(
        "uniqc",
        "uniqc.c",
        "# uniqc\n\nCollapse adjacent repeated lines of standard "
        "input, prefixing each with its count.\n\n    uniqc [-i] [-d]\n\n* `-i` ignore case\n"
        "* `-d` only print lines that repeat\n",
        _gen_uniqc,
    ),
    Program(
        "hexd",
        "hexd.c",
        "# hexd\n\nHex dump of standard input, 16 bytes per line with "
        "an ASCII column.\n\n    hexd [-n LENGTH]\n\nThe last line is the total length in "
        "hex.\n",
        _gen_hexd,
    ),
    Program(
        "fields",
        "fields.c",
        "# fields\n\nPrint selected fields of each line of standard "
        "input.\n\n    fields [-d DELIM] -f LIST\n\nLIST: comma-separated field numbers "
        "(from 1) or ranges `a-b`. The default delimiter is a tab.\n",
        _gen_fields,
    ),
    Program(
        "collatz",
        "collatz.c",
        "# collatz\n\nFor each argument N print the number of "
        "Collatz steps to reach 1 and the largest value on the way.\n\n    collatz N...\n\n"
        "Invalid arguments are reported and skipped (exit status 1).\n",
        _gen_collatz,
    ),
    Program(
        "wordfreq",
        "wordfreq.py",
        "# wordfreq\n\nThe most frequent words of standard "
        "input.\n\n    wordfreq [-k K] [-i]\n\n* `-k K` how many (default 5)\n* `-i` fold "
        "case\n\nTies are broken alphabetically.\n",
        _gen_wordfreq,
    ),
    Program(
        "jget",
        "jget.py",
        "# jget\n\nPrint the value at a dotted path of a JSON document "
        "read from standard input.\n\n    jget meta.pts.0 < doc.json\n\nStrings print raw, "
        "other values as compact JSON with sorted keys.\n",
        _gen_jget,
    ),
    Program(
        "csvsum",
        "csvsum.py",
        "# csvsum\n\nSum the numeric columns of a CSV file (with a "
        "header row) read from standard input.\n\n    csvsum [-c COLUMN]\n\nPrints "
        "`name=total` per numeric column, or only COLUMN.\n",
        _gen_csvsum,
    ),
    Program(
        "palin",
        "palin.py",
        "# palin\n\nSay which lines of standard input are "
        "palindromes (ignoring case and anything not alphanumeric).\n\n    palin [-s]\n\n"
        "`-s` prints only a summary. Exit status 1 when none is.\n",
        _gen_palin,
    ),
    Program(
        "transpose",
        "transpose.py",
        "# transpose\n\nTranspose a delimited table read from "
        "standard input (rows become columns).\n\n    transpose [-d C]\n\nThe default "
        "delimiter is a comma; short rows are padded with empty cells.\n",
        _gen_transpose,
    ),
]
"""The shipped programs (15: ten in C, five in Python)."""

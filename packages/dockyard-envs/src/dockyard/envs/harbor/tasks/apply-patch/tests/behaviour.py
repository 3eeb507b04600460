"""Behaviour of /app/textkit after the patch: every change of patches/fix.patch in effect, and
the tree's newer features (slugify's max_len, wrap.fill, stats.unique_words) still working.
Prints the number of failed checks on the last line; 0 means all passed."""

import os
import sys

sys.path.insert(0, "/app")
failed = []


def check(name, fn):
    try:
        ok = fn()
    except Exception as e:
        ok = False
        name += f" ({type(e).__name__}: {e})"
    if not ok:
        failed.append(name)


def raises(exc, fn, *args):
    try:
        fn(*args)
    except exc:
        return True
    return False


import importlib  # noqa: E402

import textkit  # noqa: E402

# the modules (``textkit.wrap`` the attribute is the function that __init__ re-exports)
slug, stats, wrap = (importlib.import_module(f"textkit.{m}") for m in ("slug", "stats", "wrap"))

# the patch
check("slug strips dashes", lambda: slug.slugify("  Hello, World!  ") == "hello-world")
check("slug accents", lambda: slug.slugify("¡Crème brûlée!") == "creme-brulee")
check("slug already slugged", lambda: slug.slugify("--already--slugged--") == "already-slugged")
check("wrap exact width", lambda: wrap.wrap("aaa bbbb cc", 7) == ["aaa", "bbbb cc"])
check(
    "wrap lines",
    lambda: wrap.wrap("one two three four five six", 9) == ["one two", "three", "four five", "six"],
)
check(
    "wrap never too long",
    lambda: all(
        len(line) <= w
        for w in range(5, 30)
        for line in wrap.wrap("the quick brown fox jumps over the lazy dog " * 5, w)
    ),
)
check("top_words ties", lambda: stats.top_words("b a b a c c d", 2) == [("a", 2), ("b", 2)])
check(
    "top_words order", lambda: stats.top_words("x y y z z z", 3) == [("z", 3), ("y", 2), ("x", 1)]
)
check("to_roman exported", lambda: "to_roman" in textkit.__all__ and textkit.to_roman(4) == "IV")
check(
    "to_roman values",
    lambda: (
        [textkit.to_roman(n) for n in (1, 9, 14, 40, 1994, 2024, 3999)]
        == ["I", "IX", "XIV", "XL", "MCMXCIV", "MMXXIV", "MMMCMXCIX"]
    ),
)
check(
    "to_roman range",
    lambda: raises(ValueError, textkit.to_roman, 0) and raises(ValueError, textkit.to_roman, 4000),
)
# the tree's newer features
check("slug max_len", lambda: slug.slugify("Hello wonderful world", max_len=12) == "hello")
check("slug max_len no dash", lambda: slug.slugify("abcdefgh", max_len=3) == "abc")
check("slug max_len edges", lambda: slug.slugify("!!Hello world!!", max_len=40) == "hello-world")
check("fill", lambda: wrap.fill("aaa bbbb cc", 7) == "aaa\nbbbb cc")
check("unique_words", lambda: stats.unique_words("b a B c") == ["a", "b", "c"])
check("word_count", lambda: stats.word_count("It's a dog's life") == 4)
check("exports", lambda: {"slugify", "top_words", "word_count", "wrap"} <= set(textkit.__all__))
# a clean tree
check(
    "no .orig/.rej left",
    lambda: not [f for _, _, fs in os.walk("/app") for f in fs if f.endswith((".orig", ".rej"))],
)
print("failed:", failed, file=sys.stderr)
print(len(failed))

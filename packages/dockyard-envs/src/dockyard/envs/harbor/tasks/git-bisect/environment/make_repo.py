"""Build the task's repository: v1.0 + 40 commits, one of which breaks the totals.

Deterministic (fixed identities and dates), so every commit hash is the same on every build.
"""

import os
import subprocess

os.remove(__file__)

T0 = 1700000000
ENV = dict(
    os.environ,
    GIT_AUTHOR_NAME="Dana Reyes",
    GIT_AUTHOR_EMAIL="dana@example.com",
    GIT_COMMITTER_NAME="Dana Reyes",
    GIT_COMMITTER_EMAIL="dana@example.com",
)
files = {}
count = 0


def git(*args):
    subprocess.run(["git", *args], check=True, env=ENV, stdout=subprocess.DEVNULL)


def commit(msg):
    global count
    for path, text in files.items():
        os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
        with open(path, "w") as f:
            f.write(text)
    os.chmod("check.sh", 0o755)
    count += 1
    date = f"{T0 + count * 5400} +0000"
    git("add", "-A")
    subprocess.run(
        ["git", "commit", "-qm", msg],
        check=True,
        env=dict(ENV, GIT_AUTHOR_DATE=date, GIT_COMMITTER_DATE=date),
    )


def edit(path, old, new):
    assert old in files[path], (path, old)
    files[path] = files[path].replace(old, new, 1)


files["check.sh"] = """#!/bin/sh
# Regression check for the cart totals.
# exit 0: totals right; 1: totals wrong; 125: this tree cannot be tested (does not import).
cd "$(dirname "$0")"
exec python3 - <<'PY'
import sys
try:
    import pricing
except Exception as e:
    print("cannot import pricing:", e)
    sys.exit(125)
CASES = [({"widget": 1}, 10.26), ({"gadget": 4}, 102.6), ({"gadget": 5}, 128.25),
         ({"widget": 2, "bolt": 10}, 31.32)]
bad = 0
for cart, want in CASES:
    got = pricing.total(cart)
    if abs(got - want) > 1e-9:
        print(f"total({cart}) = {got}, want {want}")
        bad += 1
sys.exit(1 if bad else 0)
PY
"""
files["catalog.py"] = '''"""Unit prices by SKU."""

PRICES = {
    "widget": 9.50,
    "gadget": 25.00,
    "bolt": 1.00,
    "sprocket": 4.25,
}
'''
files["pricing.py"] = '''"""Cart pricing: subtotal, bulk discount, tax."""
from catalog import PRICES

TAX_RATE = 0.08
BULK_THRESHOLD = 100.0
BULK_DISCOUNT = 0.05


def subtotal(cart):
    return sum(PRICES[sku] * qty for sku, qty in cart.items())


def discount(amount):
    if amount >= BULK_THRESHOLD:
        return amount * BULK_DISCOUNT
    return 0.0


def total(cart):
    amount = subtotal(cart)
    amount -= discount(amount)
    return round(amount * (1 + TAX_RATE), 2)
'''
files["README.md"] = "# cart pricing\n\nRun `./check.sh` before you push.\n"
files[".gitignore"] = "__pycache__/\n"

git("init", "-q", "-b", "main")
commit("initial import")
git("tag", "v1.0")

SKUS = iter(
    [
        ("nut", 0.40),
        ("washer", 0.15),
        ("gear", 12.75),
        ("spring", 2.10),
        ("pulley", 7.80),
        ("hinge", 3.35),
        ("bracket", 5.60),
        ("rivet", 0.25),
        ("axle", 18.00),
        ("bearing", 6.45),
        ("clamp", 4.90),
        ("valve", 22.50),
        ("hose", 8.20),
        ("seal", 1.75),
        ("flange", 11.30),
        ("gasket", 2.95),
        ("shim", 0.60),
        ("pin", 0.30),
        ("coupler", 9.90),
        ("bushing", 3.05),
    ]
)


def add_sku():
    sku, price = next(SKUS)
    edit("catalog.py", "}\n", f'    "{sku}": {price:.2f},\n}}\n')
    commit(f"catalog: add {sku}")


def readme(line, msg):
    files["README.md"] += line + "\n"
    commit(msg)


add_sku()
add_sku()
readme("\nPrices are in EUR, tax included in `total`.", "docs: currency note")
edit(
    "pricing.py",
    "def subtotal(cart):\n",
    'def subtotal(cart):\n    """Sum of unit price * quantity."""\n',
)
commit("pricing: tidy helpers")
add_sku()
readme("Bulk orders get a discount.", "docs: mention bulk discount")
add_sku()
edit("pricing.py", "TAX_RATE = 0.08\n", "TAX_RATE = 0.08  # flat VAT\n")
commit("pricing: comment constants")
add_sku()
add_sku()
readme(
    "\n## Development\n\nKeep `catalog.py` sorted by insertion date.", "docs: development section"
)
add_sku()
# commits 12..14 do not import: pricing uses a module that lands only in commit 15
edit(
    "pricing.py",
    "from catalog import PRICES\n",
    "from catalog import PRICES\nfrom money import fmt\n",
)
files["pricing.py"] += """

def receipt(cart):
    lines = [f"{sku:<10} x{qty:>3}  {fmt(PRICES[sku] * qty)}" for sku, qty in sorted(cart.items())]
    lines.append(f"{'total':<15}  {fmt(total(cart))}")
    return "\\n".join(lines)
"""
commit("pricing: add receipts")
add_sku()
readme("Use `pricing.receipt(cart)` for printable receipts.", "docs: receipts")
files["money.py"] = '''"""Money formatting."""


def fmt(value):
    return f"{value:>8.2f} EUR"
'''
commit("money: formatting helpers")
add_sku()
edit(
    "pricing.py",
    "def total(cart):\n",
    'def total(cart):\n    """Subtotal, minus the bulk discount, plus tax; rounded to cents."""\n',
)
commit("pricing: tidy helpers")
readme("Totals are rounded to cents.", "docs: rounding")
add_sku()
edit("money.py", "    return", '    """Right-aligned amount with its currency."""\n    return')
commit("money: docstring")
add_sku()
readme("Run `python3 -c 'import pricing'` to smoke-test imports.", "docs: smoke test")
edit("pricing.py", "BULK_DISCOUNT = 0.05\n", "BULK_DISCOUNT = 0.05  # 5 %\n")
commit("pricing: comment constants")
add_sku()
# commit 27: the regression (the discount no longer applies at exactly the threshold)
edit(
    "pricing.py",
    "def discount(amount):\n    if amount >= BULK_THRESHOLD:\n        return amount * BULK_DISCOUNT\n",
    'def discount(amount):\n    """The bulk discount for a subtotal."""\n    if amount > BULK_THRESHOLD:\n'
    "        return amount * BULK_DISCOUNT\n",
)
commit("pricing: tidy helpers")
readme("Discount thresholds live in `pricing.py`.", "docs: thresholds")
add_sku()
edit(
    "pricing.py",
    "    amount = subtotal(cart)\n    amount -= discount(amount)\n",
    "    amount = subtotal(cart)\n    amount = amount - discount(amount)\n",
)
commit("pricing: tidy helpers")
add_sku()
edit("money.py", '"""Money formatting."""', '"""Money formatting (EUR only for now)."""')
commit("money: note currency")
readme("Receipts are plain text.", "docs: receipt format")
add_sku()
edit("pricing.py", "BULK_THRESHOLD = 100.0\n", "BULK_THRESHOLD = 100.0  # subtotal, before tax\n")
commit("pricing: comment constants")
readme("\n## License\n\nMIT", "docs: license")
add_sku()
edit("pricing.py", "from money import fmt\n", "from money import fmt  # noqa: used by receipt\n")
commit("pricing: tidy helpers")
readme("Report bugs to dana@example.com.", "docs: contact")
add_sku()
assert count == 40, count

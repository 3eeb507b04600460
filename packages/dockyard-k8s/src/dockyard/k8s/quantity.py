"""Kubernetes resource quantities ("500m", "16Gi", "1e3") parsed to exact decimals.

Grammar (k8s.io/apimachinery/pkg/api/resource): ``<signedNumber><suffix>`` with suffix one of
the binary SI (Ki Mi Gi Ti Pi Ei = 2^10..2^60), decimal SI (n u m "" k M G T P E = 10^-9..10^18)
or a decimal exponent (``e3``). The schemas in kubernetes-validate accept any string here, so the
renderer checks quantities itself.
"""

from __future__ import annotations

import re
from decimal import Decimal

_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL = {"n": Decimal("1e-9"), "u": Decimal("1e-6"), "m": Decimal("1e-3"), "": Decimal(1)}
_DECIMAL |= {"k": Decimal("1e3"), "M": Decimal("1e6"), "G": Decimal("1e9"), "T": Decimal("1e12")}
_DECIMAL |= {"P": Decimal("1e15"), "E": Decimal("1e18")}
_RE = re.compile(
    r"^([+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+))(Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE]|[eE][+-]?[0-9]+)?$"
)


def parse_quantity(text: str | int | float) -> Decimal:
    """``"500m"`` -> ``Decimal("0.5")``; ``"1Gi"`` -> ``Decimal(1073741824)``. ValueError if malformed."""
    if isinstance(text, bool):
        raise ValueError(f"not a quantity: {text!r}")
    if isinstance(text, int | float):
        return Decimal(str(text))
    m = _RE.match(text.strip())
    if not m:
        raise ValueError(
            f"not a Kubernetes quantity: {text!r} (examples: '500m', '2', '16Gi', '1e3')"
        )
    number, suffix = Decimal(m.group(1)), m.group(2) or ""
    if suffix in _BINARY:
        return number * _BINARY[suffix]
    if suffix in _DECIMAL:
        return number * _DECIMAL[suffix]
    return number * (Decimal(10) ** int(suffix[1:]))


def format_cpu(value: Decimal) -> str:
    """CPU as whole cores when integral, else millicores (rounded up): 2 -> "2", 0.25 -> "250m"."""
    if value == value.to_integral_value():
        return str(int(value))
    milli = (value * 1000).to_integral_value(rounding="ROUND_CEILING")
    return f"{int(milli)}m"


def format_bytes(value: Decimal) -> str:
    """Bytes in the largest binary unit that divides them exactly (Mi at least when possible)."""
    n = int(value.to_integral_value(rounding="ROUND_CEILING"))
    for suffix, size in sorted(_BINARY.items(), key=lambda kv: -kv[1]):
        if n % size == 0 and n >= size:
            return f"{n // size}{suffix}"
    return str(n)

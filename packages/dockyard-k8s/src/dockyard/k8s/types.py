"""Small annotated types shared by the recipe and infra models."""

from __future__ import annotations

import re
from typing import Annotated

from pydantic import BeforeValidator, ConfigDict

from dockyard.k8s.quantity import parse_quantity

STRICT = ConfigDict(extra="forbid", frozen=True)

_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")


def _quantity(value: object) -> str:
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        raise ValueError(
            f"expected a Kubernetes quantity such as '500m', '4' or '16Gi', got {value!r}"
        )
    text = str(value)
    parse_quantity(text)  # raises ValueError with the accepted forms
    return text


def _dns_label(value: object) -> str:
    if not isinstance(value, str) or not _DNS_LABEL.match(value) or len(value) > 63:
        raise ValueError(
            f"{value!r} is not a DNS-1123 label (lower-case letters, digits and '-', "
            "starting and ending with a letter or digit, at most 63 characters)"
        )
    return value


Quantity = Annotated[str, BeforeValidator(_quantity)]
"""A Kubernetes resource quantity, kept as text (``"500m"``, ``"16Gi"``); ints are accepted."""

DnsLabel = Annotated[str, BeforeValidator(_dns_label)]
"""A DNS-1123 label: the form Kubernetes requires of object names and namespaces."""

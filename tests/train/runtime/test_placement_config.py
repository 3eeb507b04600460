"""``cluster.placement``: each fleet's Ray placement strategy, validated by the schema and read
by the runtime's placement groups (defaults: what runs used before the key existed)."""

from __future__ import annotations

import pytest

from dockyard.core.config import ClusterConfig
from dockyard.train.runtime.placement import DEFAULT_STRATEGIES, FleetSpec, strategies


def test_defaults_are_the_former_fixed_strategies() -> None:
    assert strategies(ClusterConfig().placement) == {
        "trainer": "SPREAD",
        "inference": "PACK",
        "sandbox": "SPREAD",
    }
    assert strategies(None) == DEFAULT_STRATEGIES
    assert FleetSpec("inference").placement_strategy == "PACK"


def test_each_fleet_takes_its_configured_strategy() -> None:
    c = ClusterConfig(placement={"trainer": "STRICT_PACK", "sandbox": "STRICT_SPREAD"})
    got = strategies(c.placement)
    assert got == {"trainer": "STRICT_PACK", "inference": "PACK", "sandbox": "STRICT_SPREAD"}
    spec = FleetSpec("trainer", size=2, strategy=got["trainer"])
    assert spec.placement_strategy == "STRICT_PACK"


@pytest.mark.parametrize("bad", ["spread", "SPEARD", "", 3])
def test_an_unknown_strategy_is_refused_with_the_choices(bad) -> None:
    with pytest.raises(ValueError, match=r"cluster\.placement\.inference: .* is not a Ray") as e:
        ClusterConfig(placement={"inference": bad})
    assert "SPREAD, PACK, STRICT_PACK, STRICT_SPREAD" in str(e.value)

"""Where the trainer sends engine i's weights over http: ``<engine's node IP>:<port + i>`` when
``weight_transport.host`` is 0.0.0.0 (the receiver binds every interface of that node), and
``host:port + i`` when host is an address. The IP is asked of each engine actor once, and again
of an actor that replaced a dead one. Unit test: fake engine and trainer actors, a fake ``ray``.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from dockyard.core.config import config_from_dict
from dockyard.serve.config import WeightSync
from dockyard.train.runtime import stack as stack_mod
from dockyard.train.runtime.stack import Stack


class _Method:
    def __init__(self, answer: Any) -> None:
        self.answer, self.calls = answer, []

    def remote(self, *args: Any) -> Any:
        self.calls.append(args)
        return self.answer  # the fake ray.get returns a "ref" as it is


class _Engine:
    def __init__(self, ip: str) -> None:
        self.node_ip = _Method(ip)
        self.update_weights = _Method(None)


class _Fleet:
    def __init__(self, actors: list[Any]) -> None:
        self.actors = actors

    def __len__(self) -> int:
        return len(self.actors)

    def dead(self, index: int) -> bool:
        return False


def _stack(host: str, engines: list[_Engine]) -> tuple[Stack, _Method]:
    dp = {"weight_transport": {"type": "http", "host": host, "port": 7000}}
    cfg = config_from_dict({"policy": {"model_name": "/m"}, "data_plane": dp})
    s = Stack.__new__(Stack)  # no Ray: only what push_weights uses
    s.cfg = SimpleNamespace(engines=SimpleNamespace(weight_format="auto"))  # type: ignore[assignment]
    s.ray = SimpleNamespace(get=lambda ref: ref, exceptions=SimpleNamespace(RayActorError=OSError))
    s.weight_sync = WeightSync(
        cfg.data_plane.weight_transport,
        run_id="r",
        gpus=bool(cfg.cluster.gpus_per_node),
        num_nodes=cfg.cluster.num_nodes,
    )
    s._engine_ips = {}
    s.engines = _Fleet(engines)  # type: ignore[assignment]
    send = _Method(8.0)
    s.trainer = SimpleNamespace(actors=[SimpleNamespace(send_weights=send)])  # type: ignore[assignment]
    return s, send


@pytest.fixture(autouse=True)
def _no_ray_wait(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(stack_mod, "gather_ranks", lambda sent, also=None: list(sent))


def _urls(send: _Method) -> list[str]:
    assert all(fmt == "auto" for *_, fmt in send.calls)  # the push's format reaches each rank
    return [tx["url"] for _, tx, *_ in send.calls]


def test_a_wildcard_host_is_reached_at_each_engines_node_ip() -> None:
    engines = [_Engine("10.0.0.5"), _Engine("10.0.0.6")]
    s, send = _stack("0.0.0.0", engines)
    assert s.push_weights(1)[1] == []  # none lost
    assert _urls(send) == ["http://10.0.0.5:7000", "http://10.0.0.6:7001"]
    assert [e.update_weights.calls[0][0]["host"] for e in engines] == ["0.0.0.0"] * 2
    s.push_weights(2)
    assert [len(e.node_ip.calls) for e in engines] == [1, 1]  # asked once per actor
    s.engines.actors[1] = replaced = _Engine("10.0.0.9")  # a restarted engine, another node
    s.push_weights(3, only=[1])
    assert _urls(send)[-1] == "http://10.0.0.9:7001"
    assert len(replaced.node_ip.calls) == 1


def test_an_address_host_is_reached_as_it_is() -> None:
    s, send = _stack("10.1.2.3", [_Engine("10.0.0.5"), _Engine("10.0.0.6")])
    s.push_weights(1)
    assert _urls(send) == ["http://10.1.2.3:7000", "http://10.1.2.3:7001"]

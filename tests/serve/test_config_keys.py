"""Run-config keys dockyard-serve reads: ``data_plane.weight_transport.host`` (what the engine's
HTTP receiver binds and where the trainer connects) and ``policy.generation.sglang_cfg`` (the
SGLang server each engine starts; run here against a fake ``sglang`` module, SGLang itself does
not install on these machines)."""

from __future__ import annotations

import asyncio
import sys
import textwrap
import threading
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from dockyard.core.config import config_from_dict
from dockyard.serve.config import WeightSync
from dockyard.serve.engines import build_engine
from dockyard.serve.engines.sglang import SGLangEngine
from dockyard.serve.engines.sglang_server import EngineDeadError, SGLangServer
from dockyard.serve.transports import make_sender, open_receiver
from dockyard.serve.transports.http import HttpReceiver


def _master(**sections: Any):
    d: dict[str, Any] = {"policy": {"model_name": "/m", "max_total_sequence_length": 300}}
    for key, value in sections.items():
        d[key] = {**d.get(key, {}), **value}
    return config_from_dict(d)


def _http(nodes: int = 1, **transport: Any) -> WeightSync:
    dp = {"weight_transport": {"type": "http", "port": 7000, **transport}}
    m = _master(data_plane=dp, cluster={"num_nodes": nodes})
    c = m.cluster
    return WeightSync(
        m.data_plane.weight_transport, run_id="r", gpus=bool(c.gpus_per_node), num_nodes=c.num_nodes
    )


# ------------------------------------------------------------------ weight_transport.host


def test_the_receiver_binds_host_and_the_sender_connects_to_it() -> None:
    _, tx, rx = _http(host="10.1.2.3").endpoints(1)
    assert (rx["host"], rx["port"]) == ("10.1.2.3", 7001)
    assert tx["url"] == "http://10.1.2.3:7001"


def test_a_wildcard_host_is_reached_at_the_engines_node() -> None:
    _, tx, rx = _http().endpoints(0)  # default host 0.0.0.0, one node: loopback
    assert rx["host"] == "0.0.0.0"
    assert tx["url"] == "http://127.0.0.1:7000"
    _, tx, rx = _http(nodes=2).endpoints(0, engine_host="10.0.0.7")
    assert (rx["host"], tx["url"]) == ("0.0.0.0", "http://10.0.0.7:7000")
    with pytest.raises(ValueError, match=r"weight_transport\.host '0\.0\.0\.0'.*2-node"):
        _http(nodes=2).endpoints(0)
    _, tx, _ = _http(nodes=2, host="10.0.0.9").endpoints(0)  # an address needs no engine_host
    assert tx["url"] == "http://10.0.0.9:7000"


def test_weights_cross_a_receiver_bound_to_every_interface() -> None:
    sync = _http(port=0, timeout_s=20)
    kind, tx, rx_spec = sync.endpoints(0)
    rx = open_receiver(rx_spec)
    assert isinstance(rx, HttpReceiver)
    rx.open()
    w = {"a": np.arange(6, dtype=np.float32), "b": np.ones((2, 3), dtype=np.float32)}
    got: dict[str, np.ndarray] = {}
    t = threading.Thread(target=lambda: got.update(*(b.tensors for b in rx.receive())))
    t.start()
    sender = make_sender(kind, **tx)
    sender.send([w], version=3)
    t.join(20)
    sender.close()
    rx.close()
    assert rx_spec["host"] == "0.0.0.0"
    assert set(got) == {"a", "b"}
    np.testing.assert_array_equal(got["a"], w["a"])


# ---------------------------------------------------------------------------- sglang_cfg


def _sglang_master(**gen: Any):
    s = {"tensor_parallel_size": 2, "mem_fraction_static": 0.45, "num_engines": 3}
    g = {"backend": "sglang", "sglang_cfg": s, **gen}
    return _master(policy={"generation": g}, cluster={"gpus_per_node": 2}, grpo={"seed": 4})


def test_sglang_engines_get_sglang_cfg(split: Any) -> None:
    engines = split.engines(_sglang_master(), "/exported", version=2)
    assert (engines.num_engines, engines.gpus) == (3, 2.0)
    assert engines.engine_kwargs() == {
        "backend": "sglang",
        "model": "/exported",
        "initial_version": 2,
        "tensor_parallel_size": 2,
        "mem_fraction_static": 0.45,
        "context_length": 300,
        "seed": 4,
        "dtype": "bfloat16",
    }


def test_the_engine_starts_a_server_with_those_flags(split: Any) -> None:
    engine = build_engine(**split.engines(_sglang_master(), "/exported").engine_kwargs())
    assert isinstance(engine, SGLangEngine)
    assert engine.server is not None
    cmd = engine.server.command()
    assert cmd[1:3] == ["-m", "sglang.launch_server"]
    flags = dict(zip(cmd[3::2], cmd[4::2], strict=True))
    assert flags == {
        "--model-path": "/exported",
        "--tp-size": "2",
        "--mem-fraction-static": "0.45",
        "--context-length": "300",
        "--random-seed": "4",
        "--dtype": "bfloat16",
        "--host": "127.0.0.1",
        "--port": str(engine.server.port),
    }
    assert engine.url == engine.server.url


def test_url_and_server_options_do_not_mix() -> None:
    with pytest.raises(ValueError, match="either url"):
        SGLangEngine()
    with pytest.raises(ValueError, match="mem_fraction_static only apply"):
        SGLangEngine("http://127.0.0.1:1", mem_fraction_static=0.5)


FAKE_LAUNCH = """
import json, sys
from http.server import BaseHTTPRequestHandler, HTTPServer

args = sys.argv[1:]
flags = dict(zip(args[::2], args[1::2]))
if flags["--model-path"] == "/broken":
    print("RuntimeError: cannot load /broken", flush=True)
    sys.exit(3)
open(flags["--model-path"] + "/argv.json", "w").write(json.dumps(flags))

class H(BaseHTTPRequestHandler):
    def log_message(self, *a):
        pass

    def do_GET(self):
        self.send_response(200 if self.path == "/health" else 404)
        self.send_header("Content-Length", "0")
        self.end_headers()

HTTPServer((flags["--host"], int(flags["--port"])), H).serve_forever()
"""


@pytest.fixture
def fake_sglang(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    pkg = tmp_path / "site" / "sglang"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "launch_server.py").write_text(textwrap.dedent(FAKE_LAUNCH))
    monkeypatch.setenv("PYTHONPATH", str(pkg.parent))
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text("{}")
    return model


def test_a_started_server_is_healthy_then_stopped(fake_sglang: Path) -> None:
    engine = SGLangEngine(model=str(fake_sglang), tensor_parallel_size=1, mem_fraction_static=0.3)
    assert engine.config_dir == str(fake_sglang)  # staged updates get the model's json files

    async def main() -> None:
        await engine.start()
        assert engine.server is not None
        assert engine.server.alive()
        await engine.aclose()

    asyncio.run(main())
    server = engine.server
    assert server is not None
    proc = server.proc
    flags = (fake_sglang / "argv.json").read_text()
    assert '"--mem-fraction-static": "0.3"' in flags
    engine.shutdown()
    assert proc is not None
    assert proc.poll() is not None
    assert not server.alive()


def test_a_server_that_exits_fails_with_its_log(fake_sglang: Path) -> None:
    server = SGLangServer("/broken", python=sys.executable, launch_timeout_s=60)
    with pytest.raises(EngineDeadError, match=r"exited with code 3[\s\S]*cannot load /broken"):
        asyncio.run(server.start())


def test_a_server_that_dies_later_is_an_engine_death(fake_sglang: Path) -> None:
    from dockyard.core.interfaces import SamplingParams

    engine = SGLangEngine(model=str(fake_sglang))

    async def main() -> None:
        await engine.start()
        assert engine.server is not None
        assert engine.server.proc is not None
        engine.server.proc.kill()
        engine.server.proc.wait()
        try:
            await engine.generate([1, 2], SamplingParams(n=1, max_tokens=2))
        finally:
            await engine.aclose()

    with pytest.raises(EngineDeadError, match="has exited"):
        asyncio.run(main())
    engine.shutdown()

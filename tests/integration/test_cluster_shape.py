"""``cluster.num_nodes`` / ``gpus_per_node`` against a real Ray cluster's ``ray.nodes()``: what
a run that joins a cluster checks before planning its fleets (the local session is one node
with no GPU)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

pytestmark = pytest.mark.slow


def test_the_joined_clusters_nodes_are_checked(ray_session) -> None:
    import ray

    from dockyard.train.runtime.cluster import node_cpus, shape_problems

    nodes = ray.nodes()
    assert shape_problems(nodes, SimpleNamespace(num_nodes=1, gpus_per_node=0)) == []
    two = shape_problems(nodes, SimpleNamespace(num_nodes=2, gpus_per_node=0))
    assert len(two) == 1
    assert "cluster.num_nodes: 2 node(s) planned, but the Ray cluster has 1 alive node(s)" in two[0]
    assert "ray start --address" in two[0]
    gpu = shape_problems(nodes, SimpleNamespace(num_nodes=1, gpus_per_node=1))
    assert len(gpu) == 1
    assert "cluster.gpus_per_node: 1 node(s) with 1 GPU(s) each planned" in gpu[0]
    assert "[0.0] GPUs" in gpu[0]
    # the fleets' CPU shares are planned on one node's CPUs (here: the only node's)
    assert node_cpus() == ray.cluster_resources()["CPU"]

"""init_ray's retry of a timed-out Ray start stops what the failed attempt left running.

Unit test of the retry loop (the Ray start is faked: a real raylet only times out on an
overloaded machine). The leftover is a real child process whose command line names ``/ray/``,
like the GCS, dashboard and monitors a failed ``ray.init`` leaves behind.
"""

from __future__ import annotations

import subprocess
import sys
from types import SimpleNamespace

import pytest

from dockyard.train.runtime import cluster


class FakeRay:
    def __init__(self, fail_times: int, message: str) -> None:
        self.fail_times, self.message = fail_times, message
        self.calls, self.leftovers = 0, []

    def is_initialized(self) -> bool:
        return False

    def init(self, **kwargs) -> None:
        self.calls += 1
        if self.calls <= self.fail_times:
            # a process as ray.init leaves it: a child of ours, running a program under /ray/
            code = "import time; time.sleep(120)"
            self.leftovers.append(subprocess.Popen([sys.executable, "-c", code, "/x/ray/gcs"]))
            raise Exception(self.message)

    def shutdown(self) -> None:
        pass

    def get_runtime_context(self):
        return SimpleNamespace(runtime_env={})

    def cluster_resources(self) -> dict[str, float]:
        return {"CPU": 1.0}


def test_a_timed_out_start_is_cleaned_up_and_retried(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = FakeRay(2, "The current node timed out during startup.")
    monkeypatch.setattr(cluster, "require_ray", lambda: fake)
    assert cluster.init_ray(SimpleNamespace(cpus_per_node=1)) == {"CPU": 1.0}
    assert fake.calls == 3
    assert [p.wait(timeout=30) is not None for p in fake.leftovers] == [True, True]


def test_another_start_error_is_raised_after_cleanup(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = FakeRay(1, "bad argument")
    monkeypatch.setattr(cluster, "require_ray", lambda: fake)
    with pytest.raises(Exception, match="bad argument"):
        cluster.init_ray(SimpleNamespace(cpus_per_node=1))
    assert fake.calls == 1
    assert fake.leftovers[0].wait(timeout=30) is not None

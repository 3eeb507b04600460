"""Harbor task directories (Terminal-Bench 2's format) run in the dockyard sandbox, no Docker.

* :mod:`.dockerfile` — the Dockerfile's common subset → a provisioned sandbox environment;
* :mod:`.tasks` — load a task directory or a folder of them (``load_tasks``);
* :mod:`.env` — :class:`HarborEnvironment`, the multi-turn terminal environment;
* :mod:`.validate` — the oracle / empty-agent check behind ``dockyard harbor validate``.
"""

from dockyard.envs.harbor.dockerfile import HarborFormatError, parse_dockerfile
from dockyard.envs.harbor.env import HarborEnvironment
from dockyard.envs.harbor.tasks import harbor_dataset, load_task, load_tasks

__all__ = [
    "HarborEnvironment",
    "HarborFormatError",
    "harbor_dataset",
    "load_task",
    "load_tasks",
    "parse_dockerfile",
]

"""dockyard.envs: environments (math, code, swe, terminal), the tool-call protocol, rewards.

Import submodules directly (``from dockyard.envs.code import CodeEnvironment``) or build by
name with :func:`dockyard.envs.registry.make_env`; :mod:`dockyard.envs.registry` also says how
another package adds an environment (an entry point). Nothing here imports torch, JAX, vLLM or
Ray.
"""

from dockyard.envs.registry import (
    DatasetSpec,
    EnvSpec,
    dataset_names,
    env_names,
    load_dataset,
    make_env,
)

__all__ = ["DatasetSpec", "EnvSpec", "dataset_names", "env_names", "load_dataset", "make_env"]

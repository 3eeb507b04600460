"""dockyard.envs: environments (math, code, swe, terminal), the tool-call protocol, rewards.

Import submodules directly (``from dockyard.envs.code import CodeEnvironment``) or build by
name with :func:`dockyard.envs.registry.make_env`. Nothing here imports torch, JAX, vLLM or Ray.
"""

from dockyard.envs.registry import env_names, make_env, register_env

__all__ = ["env_names", "make_env", "register_env"]

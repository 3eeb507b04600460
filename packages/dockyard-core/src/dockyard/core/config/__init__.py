"""dockyard's configuration: one pydantic ``MasterConfig`` loaded from YAML.

``load_config(path, overrides)`` reads a YAML file (with ``defaults:`` inheritance and
``${...}`` references), applies dotted overrides (``grpo.num_prompts_per_step=32``) and
validates; ``MasterConfig.model_validate(dict)`` validates a dict directly (pydantic's
``ValidationError``), ``config_from_dict(dict)`` the same with a :class:`ConfigError`.
The reference of every key: docs/configuration.md (``python -m dockyard.core.config.docs``).
"""

from dockyard.core.config.errors import ConfigError
from dockyard.core.config.grpo import (
    AsyncGRPOConfig,
    DrGRPOAdvConfig,
    GDPOAdvConfig,
    GRPOAdvConfig,
    GRPOConfig,
    ReinforcePPAdvConfig,
    RewardShapingConfig,
    RLOOAdvConfig,
)
from dockyard.core.config.judge import JudgeConfig
from dockyard.core.config.loader import (
    apply_overrides,
    config_from_dict,
    load_config,
    load_yaml,
    merge,
)
from dockyard.core.config.loss import (
    BradleyTerryLossConfig,
    CISPOLossConfig,
    ClippedPGLossConfig,
    DistillationLossConfig,
    NLLLossConfig,
    PluginPGLossConfig,
    PreferenceLossConfig,
)
from dockyard.core.config.optim import OptimizerConfig, SchedulerConfig, lr_factor
from dockyard.core.config.policy import (
    DTensorConfig,
    GenerationConfig,
    JaxConfig,
    LoRAConfig,
    PolicyConfig,
    SglangConfig,
    TokenizerConfig,
    VllmConfig,
)
from dockyard.core.config.schema import MasterConfig
from dockyard.core.config.sections import (
    CheckpointingConfig,
    ClusterConfig,
    CollectiveTransportConfig,
    DataConfig,
    DataPlaneConfig,
    EnvConfig,
    HttpTransportConfig,
    LoggerConfig,
    PlacementConfig,
    RolloutLogConfig,
    ShmTransportConfig,
    WandbConfig,
)

__all__ = [
    "AsyncGRPOConfig",
    "BradleyTerryLossConfig",
    "CISPOLossConfig",
    "CheckpointingConfig",
    "ClippedPGLossConfig",
    "ClusterConfig",
    "CollectiveTransportConfig",
    "ConfigError",
    "DTensorConfig",
    "DataConfig",
    "DataPlaneConfig",
    "DistillationLossConfig",
    "DrGRPOAdvConfig",
    "EnvConfig",
    "GDPOAdvConfig",
    "GRPOAdvConfig",
    "GRPOConfig",
    "GenerationConfig",
    "HttpTransportConfig",
    "JaxConfig",
    "JudgeConfig",
    "LoRAConfig",
    "LoggerConfig",
    "MasterConfig",
    "NLLLossConfig",
    "OptimizerConfig",
    "PlacementConfig",
    "PluginPGLossConfig",
    "PolicyConfig",
    "PreferenceLossConfig",
    "RLOOAdvConfig",
    "ReinforcePPAdvConfig",
    "RewardShapingConfig",
    "RolloutLogConfig",
    "SchedulerConfig",
    "SglangConfig",
    "ShmTransportConfig",
    "TokenizerConfig",
    "VllmConfig",
    "WandbConfig",
    "apply_overrides",
    "config_from_dict",
    "load_config",
    "load_yaml",
    "lr_factor",
    "merge",
]

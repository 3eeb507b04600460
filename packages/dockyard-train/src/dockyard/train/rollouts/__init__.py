"""The rollout log: every step's trajectories as Parquet (:mod:`.log` writes, :mod:`.record`
shapes one row, :mod:`.read` reads it back for ``dockyard view`` and tests)."""

from dockyard.train.rollouts.log import FOLDER, Decoder, RolloutLog, step_file, write_rows
from dockyard.train.rollouts.record import SCHEMA, trajectory_row

__all__ = ["FOLDER", "SCHEMA", "Decoder", "RolloutLog", "step_file", "trajectory_row", "write_rows"]

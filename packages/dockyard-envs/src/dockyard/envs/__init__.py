"""dockyard.envs."""

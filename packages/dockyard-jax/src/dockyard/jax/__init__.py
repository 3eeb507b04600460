"""dockyard.jax."""

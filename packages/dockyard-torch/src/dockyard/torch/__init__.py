"""dockyard.torch."""

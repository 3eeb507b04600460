"""dockyard.serve."""

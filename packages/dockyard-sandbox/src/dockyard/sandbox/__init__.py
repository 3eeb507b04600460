"""dockyard.sandbox."""

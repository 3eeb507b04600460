"""dockyard.k8s."""

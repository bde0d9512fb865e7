"""sunk-sandbox-operator: place CoreWeave sandboxes through the SUNK Pod Scheduler."""

__version__ = "0.1.0"

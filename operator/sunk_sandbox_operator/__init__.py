"""sunk-sandbox-operator: place CoreWeave sandboxes through the SUNK Pod Scheduler."""

# The project's one version: pyproject.toml reads it (setuptools dynamic), the Helm chart's
# appVersion, the image tag and `sunk-sandbox-operator --version` equal it (tests/unit/test_release.py).
__version__ = "0.1.0"

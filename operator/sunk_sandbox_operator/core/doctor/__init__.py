"""The doctor's pure modules: the observation it gathers, the runbook's checks over it, and the
room the Nodes of shared NodeSets leave for a sandbox pod.

Decisions only (no I/O): `adapters/doctor.py` gathers the observation, `doctor.py` (the CLI) runs
the checks and prints them.
"""

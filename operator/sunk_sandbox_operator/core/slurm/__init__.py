"""The Slurm wing's pure modules: slurmrestd's answers read into facts (jobs, partitions, the
token's offline check, SlurmReady), sandbox pods matched to placeholder jobs, the shared poller's
decision per wake, and the OpenAPI versions slurmrestd speaks.

Decisions only (no await, no I/O): `controller/slurm.py` and `controller/slurm_poll.py` gather,
call them and act.
"""

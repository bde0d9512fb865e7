"""The scheduler wing's pure modules: which pods and ConfigMaps are the SUNK scheduler's, the name
and kill-wait they give and SchedulerReady; the parsers of what they carry (scheduler.conf,
slurm.conf, the container's argv) and what discovery keeps of each object.

Decisions only (no await, no I/O): `adapters/scheduler.py` reads, `controller/reconcile.py` and
`controller/depends.py` call them.
"""

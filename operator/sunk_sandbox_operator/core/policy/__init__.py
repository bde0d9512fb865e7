"""The policy wing's pure modules: the runner policy's paths and checks, the merge / restore / diff
of the fields a binding owns, the ownership record, the decision per reconcile (write, report or
stand down), and the tug-of-war with another writer and its handoff.

Decisions only (no await, no I/O): `controller/policy.py` gathers, calls them and acts.
"""

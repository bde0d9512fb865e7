"""The scope wing's pure modules: which namespaces belong, the list and its ledger, the roll, the
grants and the scheduler's RBAC, ScopeSynced; the target's document and who else writes it.

Decisions only (no await, no I/O): `controller/scope/` gathers, calls them and acts.
"""

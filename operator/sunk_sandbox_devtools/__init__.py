"""Local-only developer tools: a real control plane (`devcluster`) and the end-to-end `demo`.

Not part of the runtime wheel (pyproject's `packages.find` includes `sunk_sandbox_operator*`
only) and never imported by the operator. Run from the source tree:

    PYTHONPATH=operator .venv/bin/python -m sunk_sandbox_devtools devcluster up|down|env|build
    PYTHONPATH=operator .venv/bin/python -m sunk_sandbox_devtools demo [--keep]

`devcluster` needs the `local` extra (cryptography).
"""

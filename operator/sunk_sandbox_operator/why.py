"""`why` (also `kubectl ssb why`): why is this sandbox pod not placed? One line per link of the chain.

    kubectl ssb why pod NAMESPACE/NAME [-o text|json|yaml] [flags]
    kubectl ssb why namespace NAMESPACE [-o text|json|yaml] [flags]

The binding matching the namespace, the scope target's list, the scheduler rolled onto it, its RBAC
there, the runner policy, the pod's scheduler and pinned annotations, the grace rule, the
placeholder job in Slurm: ✓ holds, ✗ broken (with its fix), - not checked, ? could not be told;
then the first broken link, or "placeable". Exit 0 when no link is broken, 1 when one is (or the pod
does not exist), 2 when it could not run. Reads only, and only what the cluster records (it answers
with the operator stopped). The parts: adapters/why.py reads, core/why.py judges, this module parses
flags and prints. The operator's settings, as for `doctor`: `--allowed-api-url` and the other `run`
flags, else their SSB_* variables.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from typing import Any

from .output import OUTPUTS, read_or_exit_code, render

PROG = "sunk-sandbox-operator why"
MARKS = {True: "✓", False: "✗", None: "-"}
KINDS = {"pod": "pod", "pods": "pod", "po": "pod", "namespace": "namespace", "namespaces": "namespace", "ns": "namespace"}


def parser(prog: str = PROG) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=prog, description="Why is this sandbox pod not placed? Checks each link from "
                                "its namespace's binding to its placeholder job in Slurm, and names the first broken "
                                "one with its fix (reads only). Exit 1 when a link is broken.")
    p.add_argument("kind", choices=sorted(KINDS), metavar="pod|namespace", help="a pod (NAMESPACE/NAME), or a namespace "
                   "(what a new sandbox pod there would meet)")
    p.add_argument("target", metavar="NAMESPACE/NAME|NAMESPACE")
    p.add_argument("-o", "--output", choices=OUTPUTS, default="text")
    p.add_argument("--pending-seconds", type=float, default=None, metavar="SECONDS",
                   help="a placeholder job pending for one reason (or missing) this long after submission (the pod's "
                   "creation) is a broken link (default: SSB_SLURM_PENDING_SECONDS, else 60, as the operator)")
    ops = p.add_argument_group("the operator's settings (as for `run` and `doctor`; default: its SSB_* variables)")
    ops.add_argument("--allowed-api-url", action="append", default=None, metavar="URL")
    ops.add_argument("--allowed-slurm-url", action="append", default=None, metavar="URL")
    ops.add_argument("--allow-reach", action="append", default=None, metavar="NS=TARGETS")
    ops.add_argument("--allow-grant", action="append", default=None, metavar="NS=NAMESPACES")
    ops.add_argument("--allow-match-all", action="store_true", default=None)
    ops.add_argument("--sandbox-namespace-selector", default=None, metavar="SELECTOR")
    return p


def _ask(args: argparse.Namespace, parser_: argparse.ArgumentParser) -> Any:
    from .adapters.why import Ask

    kind = KINDS[args.kind]
    pending = args.pending_seconds
    if pending is None:
        try:
            pending = float(os.environ.get("SSB_SLURM_PENDING_SECONDS") or 60.0)
        except ValueError:
            parser_.error("SSB_SLURM_PENDING_SECONDS is not a number of seconds")
    if pending < 0:
        parser_.error("--pending-seconds: must be 0 or more")
    if kind == "pod":
        ns, sep, name = args.target.partition("/")
        if not sep or not ns or not name or "/" in name:
            parser_.error(f"expected NAMESPACE/NAME for a pod, got {args.target!r}")
        return Ask(ns, name, pending)
    if "/" in args.target or not args.target:
        parser_.error(f"expected a namespace name, got {args.target!r}")
    return Ask(args.target, None, pending)


async def _observe(ask: Any, tenancy: Any) -> Any:
    from .adapters import kube as k
    from .adapters import kubeconfig
    from .adapters import why as gather
    from .adapters.kubehttp import KubeHTTP

    http = KubeHTTP(kubeconfig.load())
    try:
        return await gather.gather(k.Kube(http), ask, tenancy)
    finally:
        await http.close()


def _line(link: Any) -> str:
    mark = "?" if link.unknown else MARKS[link.ok]
    text = f"{mark} {link.name}: {link.detail}"
    return text + (f" — fix: {link.fix}" if link.fix and (link.ok is False or link.unknown) else "")


def main(argv: list[str] | None = None, prog: str = PROG) -> int:
    p = parser(prog)
    args = p.parse_args(argv)
    ask = _ask(args, p)
    from .adapters.why import PodNotFound
    from .controller import config
    from .core import why

    tenancy = config.tenancy_from_flags(args, p.error)
    obs = read_or_exit_code(p.prog, lambda: asyncio.run(_observe(ask, tenancy)), PodNotFound)
    if isinstance(obs, int):
        return obs
    links = why.evaluate(obs)
    verdict = why.verdict(links)
    if args.output != "text":
        sys.stdout.write(render(why.wire(obs, links), args.output))
    else:
        b = obs.binding
        print(f"{prog}: {obs.subject}" + (f" (binding {b.ref})" if b else ""))
        for link in links:
            print(_line(link))
        print(verdict.text(obs))
    return 1 if verdict.broken is not None else 0

"""The kubectl plugin: `kubectl ssb doctor|why|version` (kubectl runs `kubectl-ssb` from PATH), and its
shell completion (`kubectl_complete-ssb`, which kubectl ≥ 1.26 runs for `kubectl ssb <TAB>` in bash
and zsh alike: the arguments typed after `ssb`, the last one being the word to complete; it prints
one candidate per line, then `:<directive>`, Cobra's protocol).

Completion reads the cluster only to offer names (bindings, namespaces, pods), within a short
timeout; it says nothing when it cannot. `--help` on every command prints help and does nothing else.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Callable, Sequence

from .output import OUTPUTS, render

USAGE = """usage: kubectl ssb COMMAND [ARGS]

commands:
  doctor [NAMESPACE/NAME]        check the runbook against the cluster (reads only; exit 1 when a check fails)
  why pod NAMESPACE/NAME         why is this sandbox pod not placed? each link, the first broken one and its fix
  why namespace NAMESPACE        ... for a new sandbox pod in this namespace
  version                        print the plugin's version

`kubectl ssb COMMAND --help` for a command's flags; `-o text|json|yaml` wherever it prints.
Shell completion: put kubectl_complete-ssb (installed with the plugin) on PATH; kubectl's own bash or
zsh completion then completes `kubectl ssb` (kubectl 1.26 or later)."""

COMMANDS = {"doctor": "check the runbook against the cluster", "why": "why is a sandbox pod not placed",
            "version": "print the plugin's version"}
COMPLETION_TIMEOUT = 3.0
# Cobra's ShellCompDirective bits (kubectl reads the last line `:<n>`).
NO_SPACE, NO_FILES = 2, 4


def version_main(argv: list[str], prog: str = "kubectl ssb version") -> int:
    p = argparse.ArgumentParser(prog=prog, description="Print the plugin's version.")
    p.add_argument("-o", "--output", choices=OUTPUTS, default="text")
    args = p.parse_args(argv)
    from . import __version__

    if args.output == "text":
        print(f"kubectl-ssb {__version__} (sunk-sandbox-operator {__version__}, Python "
              f"{'.'.join(map(str, sys.version_info[:3]))})")
    else:
        sys.stdout.write(render({"version": __version__, "python": ".".join(map(str, sys.version_info[:3]))},
                                args.output))
    return 0


def main(argv: list[str] | None = None) -> int:
    """`kubectl-ssb COMMAND ...`."""
    argv = list(sys.argv[1:] if argv is None else argv)
    command, rest = (argv[0], argv[1:]) if argv else ("", [])
    if command in ("", "-h", "--help", "help"):
        print(USAGE)
        return 0
    if command in ("version", "--version"):
        return version_main(rest)
    if command == "doctor":
        from . import doctor
        return doctor.main(rest, prog="kubectl ssb doctor")
    if command == "why":
        from . import why
        return why.main(rest, prog="kubectl ssb why")
    if command == "__complete":  # Cobra's hidden command: `kubectl ssb __complete ARGS... WORD`
        return complete_main(rest)
    print(f"kubectl ssb: unknown command {command!r}\n\n{USAGE}", file=sys.stderr)
    return 2


# ---------------------------------------------------------------- completion


def _flags(parser: argparse.ArgumentParser) -> tuple[list[str], set[str]]:
    """Every long option, and those taking a value."""
    names, valued = [], set()
    for action in parser._actions:  # argparse has no public list of its options
        for opt in action.option_strings:
            if opt.startswith("--"):
                names.append(opt)
            if action.nargs != 0:
                valued.add(opt)
    return names, valued


def _parsers() -> dict[str, argparse.ArgumentParser]:
    from . import doctor, why

    version = argparse.ArgumentParser()
    version.add_argument("-o", "--output", choices=OUTPUTS)
    return {"doctor": doctor._parser(), "why": why.parser(), "version": version}


Lister = Callable[[str, str], Sequence[str]]


def candidates(words: Sequence[str], lister: Lister | None = None) -> tuple[list[str], int]:
    """Completions for `kubectl ssb WORDS...` (the last word is the one being typed) and Cobra's directive.
    `lister(kind, namespace)` names objects of a kind ("bindings" as ns/name, "namespaces", "pods" in a
    namespace); None: the cluster is not asked."""
    *before, word = list(words) or [""]
    if not before:
        return [f"{c}\t{d}" for c, d in COMMANDS.items() if c.startswith(word)], NO_FILES
    command = before[0]
    parsers = _parsers()
    if command not in parsers:
        return [], NO_FILES
    flags, valued = _flags(parsers[command])
    prev = before[-1] if len(before) > 1 else ""
    if prev in ("-o", "--output"):
        return [o for o in OUTPUTS if o.startswith(word)], NO_FILES
    if prev in valued:
        return [], NO_FILES  # a value we do not know how to offer
    if word.startswith("-"):
        return [f for f in flags if f.startswith(word)], NO_FILES
    positional = [w for i, w in enumerate(before[1:], 1) if not w.startswith("-") and before[i - 1] not in valued]
    ask = lister or (lambda kind, ns: ())
    if command == "doctor" and not positional:
        return [b for b in ask("bindings", "") if b.startswith(word)], NO_FILES
    if command == "why":
        if not positional:
            return [k for k in ("pod", "namespace") if k.startswith(word)], NO_FILES
        if len(positional) == 1 and positional[0] in ("namespace", "namespaces", "ns"):
            return [n for n in ask("namespaces", "") if n.startswith(word)], NO_FILES
        if len(positional) == 1 and positional[0] in ("pod", "pods", "po"):
            if "/" not in word:  # the namespace first, then its pods
                return [f"{n}/" for n in ask("namespaces", "") if n.startswith(word)], NO_FILES | NO_SPACE
            ns = word.partition("/")[0]
            return [f"{ns}/{p}" for p in ask("pods", ns) if f"{ns}/{p}".startswith(word)], NO_FILES
    return [], NO_FILES


def cluster_lister() -> Lister:
    """Names from the cluster (KUBECONFIG, as the plugin reads it), each read bounded by a timeout."""
    def ask(kind: str, namespace: str) -> Sequence[str]:
        async def read() -> list[str]:
            from .adapters import kube as k
            from .adapters import kubeconfig
            from .adapters.kubehttp import KubeHTTP

            http = KubeHTTP(kubeconfig.load())
            try:
                kube = k.Kube(http)
                kube.writable = lambda: False
                if kind == "bindings":
                    items = await kube.list_bindings()
                    return sorted(f"{m.get('namespace')}/{m.get('name')}" for m in (i.get("metadata") or {} for i in items))
                items = await (kube.list_pods(namespace, None) if kind == "pods" else kube.list_namespaces())
                return sorted(str((i.get("metadata") or {}).get("name") or "") for i in items)
            finally:
                await http.close()
        try:
            return asyncio.run(asyncio.wait_for(read(), COMPLETION_TIMEOUT))
        except Exception:  # completion never fails the shell: no names offered
            return []
    return ask


def complete_main(argv: list[str] | None = None) -> int:
    """`kubectl_complete-ssb ARGS... WORD` (and `kubectl-ssb __complete ...`)."""
    words = list(sys.argv[1:] if argv is None else argv)
    found, directive = candidates(words, cluster_lister())
    for c in found:
        print(c)
    print(f":{directive}")
    return 0

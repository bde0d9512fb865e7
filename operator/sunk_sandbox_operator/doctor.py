"""`doctor` (also `kubectl ssb doctor`): the seed runbook's checks against the current cluster.

    sunk-sandbox-operator doctor [NAMESPACE/NAME] [-o text|json|yaml] [flags]

With a binding, everything comes from its spec, under the tenancy rules the operator applies
(its token goes only to an API URL the operator's settings allow). Which settings: those given to
the doctor (`--allowed-api-url` and the other `run` settings, or their SSB_* variables), else the
ones the operator publishes (ConfigMap sunk-sandbox-operator-settings in `--operator-namespace`,
written by the leader at the start of its term: adapters/settings.py), else the defaults; the
second line says which. Without a binding, the prerequisites, from flags.
Credentials: KUBECONFIG (or in-cluster), as the operator loads them. Reads only. One line per
check (✓, ✗ with the fix, - not applicable); exit 1 when a check fails or the binding is not found,
2 on bad usage. The parts: adapters/doctor.py gathers, core/doctor/checks.py checks, this module
parses flags and prints.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from dataclasses import replace
from typing import Any

from pydantic import ValidationError

PROG = "sunk-sandbox-operator doctor"
MARKS = {True: "✓", False: "✗", None: "-"}
PREREQUISITE_FLAGS = ("scheduler_namespace", "scheduler_selector", "scheduler_name", "kill_wait_seconds", "runner_id",
                      "api_url", "token_secret", "partition", "sandbox_namespaces", "sandbox_selector", "expected_grace",
                      "client_annotation", "slurm_url", "slurm_user", "slurm_token_secret", "slurm_api_version")


def _parser(prog: str = PROG) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=prog, description="Check the SUNK sandbox runbook against the current cluster "
                                "(reads only). Exit 1 when a check fails.")
    p.add_argument("binding", nargs="?", metavar="NAMESPACE/NAME",
                   help="check this SunkSandboxBinding (everything from its spec); without it, the prerequisites")
    p.add_argument("-o", "--output", choices=["text", "json", "yaml"], default="text")
    pre = p.add_argument_group("prerequisites (no binding yet)")
    pre.add_argument("--scheduler-namespace", default=None, help="the Slurm namespace the scheduler (and the "
                     "NodeSets' slurmd pods) run in (default tenant-slurm)")
    pre.add_argument("--scheduler-selector", default=None, metavar="SELECTOR",
                     help="the scheduler's pods (default app.kubernetes.io/name=sunk-scheduler)")
    pre.add_argument("--scheduler-name", default=None, help="the name sandbox pods will carry (default: discovered)")
    pre.add_argument("--kill-wait-seconds", type=int, default=None, help="Slurm's KillWait, when not discoverable")
    pre.add_argument("--runner-id", default=None)
    pre.add_argument("--api-url", default=None, help="runner API base URL (default https://api.coreweave.com)")
    pre.add_argument("--token-secret", default=None, metavar="NS/NAME[:KEY]", help="the Secret holding the API "
                     "token (key default: token)")
    pre.add_argument("--partition", default=None, help="the Slurm partition sandboxes will be pinned to")
    pre.add_argument("--sandbox-namespaces", action="append", default=None, metavar="GLOB[,GLOB]",
                     help="sandbox namespaces by name (default: the namespaces holding sandbox pods)")
    pre.add_argument("--sandbox-selector", default=None, metavar="SELECTOR", help="sandbox namespaces by label (with or instead of --sandbox-namespaces)")
    pre.add_argument("--expected-grace", type=int, default=None, metavar="SECONDS",
                     help="terminationGracePeriodSeconds sandbox pods use (default 30; 300 with snapshot storage)")
    pre.add_argument("--client-annotation", action="append", default=None, metavar="KEY",
                     help="an annotation clients must stay free to set (policy check)")
    pre.add_argument("--slurm-url", default=None, help="slurmrestd base URL, to ask it for the partition")
    pre.add_argument("--slurm-user", default=None, help="the Slurm user the token is for (X-SLURM-USER-NAME)")
    pre.add_argument("--slurm-token-secret", default=None, metavar="NS/NAME[:KEY]", help="the Secret holding the "
                     "Slurm JWT (`scontrol token username=USER`; key default: token)")
    pre.add_argument("--slurm-api-version", default=None, help="slurmrestd's OpenAPI version (default: negotiated, the "
                     "newest it serves of v0.0.38, v0.0.40-v0.0.45)")
    both = p.add_argument_group("either mode")
    both.add_argument("--nodeset", action="append", default=[], metavar="NAME",
                      help="a NodeSet shared with sandboxes (repeatable; default: every NodeSet found)")
    both.add_argument("--sandbox-requests", default=None, metavar="cpu=500m,memory=512Mi",
                      help="what a sandbox pod requests (default: the largest requests among the sandbox pods seen)")
    ops = p.add_argument_group("the operator's settings (as for `run`; default: its SSB_* environment variables)")
    ops.add_argument("--allowed-api-url", action="append", default=None, metavar="URL")
    ops.add_argument("--allowed-slurm-url", action="append", default=None, metavar="URL")
    ops.add_argument("--allow-reach", action="append", default=None, metavar="NS=TARGETS")
    ops.add_argument("--allow-grant", action="append", default=None, metavar="NS=NAMESPACES")
    ops.add_argument("--sandbox-namespace-selector", default=None, metavar="SELECTOR")
    ops.add_argument("--allow-match-all", action="store_true", default=None)
    ops.add_argument("--operator-namespace", default=None, metavar="NS",
                     help="where the operator publishes its settings, used when none is given here (default "
                     "SSB_OPERATOR_NAMESPACE, else sunk-sandbox-operator-system)")
    return p


def _secret_ref(text: str, parser: argparse.ArgumentParser, flag: str) -> tuple[str, str, str]:
    ref, _, key = text.partition(":")
    ns, sep, name = ref.partition("/")
    if not sep or not ns or not name:
        parser.error(f"{flag}: expected NAMESPACE/NAME[:KEY], got {text!r}")
    return ns, name, key or "token"


def _selector(text: str, parser: argparse.ArgumentParser, flag: str) -> dict[str, Any]:
    from .core import selectors

    parsed = selectors.parse_selector_string(text)
    if parsed.error:
        parser.error(f"{flag}: {parsed.error}")
    return {"matchExpressions": [{"key": r.key, "operator": r.operator, "values": list(r.values)}
                                 for r in parsed.requirements]}


def _requests(text: str, parser: argparse.ArgumentParser) -> Any:
    from .core.units import parse_quantity
    from .core.doctor.node_room import Resources

    values: dict[str, Any] = {}
    for part in filter(None, (x.strip() for x in text.split(","))):
        key, sep, value = part.partition("=")
        try:
            values[key] = parse_quantity(value) if sep and key in ("cpu", "memory") else None
        except ValueError:
            values[key] = None
        if values[key] is None:
            parser.error(f"--sandbox-requests: {part!r} is not cpu=QUANTITY or memory=QUANTITY")
    return Resources(values.get("cpu", 0), values.get("memory", 0))


def _prerequisites(args: argparse.Namespace, parser: argparse.ArgumentParser) -> tuple[dict[str, Any], Any, Any]:
    """A spec made of the flags, and where the runner token and the Slurm token are."""
    scheduler: dict[str, Any] = {"namespace": args.scheduler_namespace or "tenant-slurm"}
    if args.scheduler_selector:
        scheduler["podSelector"] = _selector(args.scheduler_selector, parser, "--scheduler-selector")
    if args.scheduler_name:
        scheduler["name"] = args.scheduler_name
    if args.kill_wait_seconds is not None:
        scheduler["killWaitSeconds"] = args.kill_wait_seconds
    globs = [g.strip() for x in args.sandbox_namespaces or [] for g in x.split(",") if g.strip()]
    sandbox: dict[str, Any] = {"names": globs}
    if args.sandbox_selector:
        sandbox["selector"] = _selector(args.sandbox_selector, parser, "--sandbox-selector")
    token = _secret_ref(args.token_secret, parser, "--token-secret") if args.token_secret else None
    if (args.runner_id is None) != (token is None):
        parser.error("--runner-id and --token-secret go together")
    spec: dict[str, Any] = {"runner": {"id": args.runner_id or "none", "tokenSecretRef": {"name": "none"}},
                            "scheduler": scheduler, "sandboxNamespaces": sandbox,
                            "clientAnnotations": args.client_annotation or []}
    for field, value in (("partition", args.partition), ("expectedGracePeriodSeconds", args.expected_grace)):
        if value is not None:
            spec[field] = value
    if args.api_url:
        spec["runner"]["apiURL"] = args.api_url
    slurm = (args.slurm_url, args.slurm_user, args.slurm_token_secret)
    if any(slurm) and not all(slurm):
        parser.error("--slurm-url, --slurm-user and --slurm-token-secret go together")
    slurm_token = _secret_ref(args.slurm_token_secret, parser, "--slurm-token-secret") if all(slurm) else None
    if slurm_token is not None:
        spec["slurm"] = {"restAPI": {"url": args.slurm_url, "user": args.slurm_user,
                                     "tokenSecretRef": {"name": slurm_token[1], "key": slurm_token[2]},
                                     **({"apiVersion": args.slurm_api_version} if args.slurm_api_version else {})}}
    return spec, token, slurm_token


OWN_FLAGS = ("allowed_api_url", "allowed_slurm_url", "allow_reach", "allow_grant", "sandbox_namespace_selector",
             "allow_match_all")
DEFAULTS = "the defaults (runner API https://api.coreweave.com only, no slurmrestd, no reach, no grants)"


def _own(args: argparse.Namespace) -> bool:
    """Settings given to the doctor itself: a `run` flag, or one of its SSB_* variables."""
    import os

    from .controller.config import TENANCY_VARIABLES

    return any(getattr(args, f, None) for f in OWN_FLAGS) or any(os.environ.get(v) for v in TENANCY_VARIABLES)


async def _settings(kube: Any, args: argparse.Namespace, parser: argparse.ArgumentParser) -> tuple[Any, dict]:
    """The tenancy settings to judge with, and which they are: the doctor's own (flags, SSB_*
    variables), else the operator's published ones, else the defaults."""
    import os

    from .adapters import kube as k
    from .adapters import settings
    from .controller import config
    from .core import operator_settings as ops
    from .core.redact import describe

    if _own(args):
        return config.tenancy_from_flags(args, parser.error), {
            "source": "flags", "detail": "the doctor's own (its flags and SSB_* variables; defaults for the rest)",
            "label": "the doctor's own settings"}
    ns = args.operator_namespace or os.environ.get("SSB_OPERATOR_NAMESPACE") or config.Config().operator_namespace
    where = f"ConfigMap {ns}/{settings.NAME}"
    try:
        data = await settings.read(kube, ns)
        published = ops.decode(data) if data is not None else None
        policy = config.from_published(published).tenancy() if published is not None else None
    except k.Forbidden as exc:
        why = f"these credentials may not read {where} ({describe(exc)})"
    except ValueError as exc:
        why = f"the operator's settings in {where} do not parse ({describe(exc)})"
    else:
        if published is not None and policy is not None:
            by = f" by {published.published_by}" if published.published_by else ""
            version = f", operator {published.version}" if published.version else ""
            return policy, {"source": "operator", "configMap": where, "publishedAt": published.published_at,
                            "publishedBy": published.published_by, "label": "the operator's settings",
                            "detail": f"the operator's, published {published.published_at or '(no time)'}{by} "
                                      f"({where}{version})"}
        why = (f"the operator published none in {where} (is it running there? --operator-namespace, or give its "
               "settings as flags)")
    return config.tenancy_from_flags(args, parser.error), {"source": "defaults", "detail": f"{DEFAULTS}: {why}",
                                                           "label": "the defaults: no settings of the operator's "
                                                                    "were found (see the settings line)"}


async def _observe(args: argparse.Namespace, parser: argparse.ArgumentParser) -> Any:
    from .adapters import doctor as gather
    from .adapters import kube as k
    from .adapters import kubeconfig
    from .adapters.kubehttp import KubeHTTP
    from .api.spec import parse_spec
    from .core.redact import describe
    from .render import format_validation_error
    from .core.redact import describe

    need = _requests(args.sandbox_requests, parser) if args.sandbox_requests else None
    http = KubeHTTP(kubeconfig.load())
    kube = k.Kube(http)
    try:
        kube.writable = lambda: False  # reads only (adapters/doctor.py shuts it again)
        tenancy, said = await _settings(kube, args, parser)
        if args.binding:
            ns, sep, name = args.binding.partition("/")
            if not sep or not ns or not name:
                parser.error(f"expected NAMESPACE/NAME, got {args.binding!r}")
            try:
                body = await kube.get_binding(ns, name)
            except k.NotFound:
                raise BindingNotFound(f"binding {args.binding} not found") from None
            except k.Forbidden as exc:
                raise BindingNotFound(f"binding {args.binding}: {describe(exc)}") from None
            try:
                spec = parse_spec(body.get("spec") or {})
            except ValidationError as exc:
                parser.error(f"binding {args.binding}: invalid spec: {format_validation_error(exc)}")
            ref, rest = spec.runner.token_secret_ref, spec.slurm.rest_api
            slurm_token = (ns, rest.token_secret_ref.name, rest.token_secret_ref.key) if rest is not None else None
            target = gather.Target(spec, ns, args.binding, (ns, ref.name, ref.key), tuple(args.nodeset), need,
                                   slurm_token)
        else:
            raw, token, slurm_token = _prerequisites(args, parser)
            try:
                spec = parse_spec(raw)
            except ValidationError as exc:
                parser.error(format_validation_error(exc, root="flags"))
            target = gather.Target(spec, spec.scheduler.namespace, None, token, tuple(args.nodeset), need, slurm_token)
        label = said.pop("label")
        return replace(await gather.gather(kube, target, tenancy), settings=label), said
    finally:
        await http.close()


class BindingNotFound(Exception):
    """The binding asked about does not exist or may not be read: one line, exit 1 (not a usage error)."""


def _line(r: Any) -> str:
    text = f"{MARKS[r.ok]} {r.name}: {r.detail}"
    return text + (f" — fix: {r.fix}" if r.ok is False and r.fix else "")


def main(argv: list[str] | None = None, prog: str = PROG) -> int:
    parser = _parser(prog)
    args = parser.parse_args(argv)
    if args.binding:
        given = [f"--{f.replace('_', '-')}" for f in PREREQUISITE_FLAGS if getattr(args, f) is not None]
        if given:
            parser.error(f"{', '.join(given)}: a binding's checks take everything from its spec")
    from .core.doctor import checks as doctor
    from .output import read_or_exit_code

    got = read_or_exit_code(parser.prog, lambda: asyncio.run(_observe(args, parser)), BindingNotFound)
    if isinstance(got, int):
        return got
    obs, said = got
    results = doctor.evaluate(obs)
    bad = doctor.failed(results)
    if args.output != "text":
        from .output import render
        sys.stdout.write(render({"binding": obs.binding, "schedulerNamespace": obs.scheduler_namespace, "ok": not bad,
                                 "settings": said,
                                 "checks": [{"id": r.id, "name": r.name, "ok": r.ok, "detail": r.detail, "fix": r.fix}
                                            for r in results]}, args.output))
    else:
        what = f"binding {obs.binding}" if obs.binding else "prerequisites (no binding)"
        print(f"sunk-sandbox-operator doctor: {what}; scheduler namespace {obs.scheduler_namespace}")
        print(f"settings: {said['detail']}")
        for r in results:
            print(_line(r))
        failures = sum(r.ok is False for r in results)
        print(f"{failures} check(s) failed" if failures else "every check passed")
    return 1 if bad else 0


def kubectl_plugin(argv: list[str] | None = None) -> int:
    """`kubectl ssb doctor ...`, as the kubectl-ssb of installs before plugin.py ran it (the plugin is
    plugin.main now: doctor, why, version and completion); kept while such console scripts exist."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] != ["doctor"]:
        print("usage: kubectl ssb doctor [NAMESPACE/NAME] [-o json] [flags]   (kubectl ssb doctor --help)",
              file=sys.stderr)
        return 0 if argv[:1] in (["-h"], ["--help"], []) else 2
    return main(argv[1:], prog="kubectl ssb doctor")

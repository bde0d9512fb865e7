"""Command line: run | doctor | runner-api-emulator | render-policy | crd (the local tools live in sunk_sandbox_devtools)."""

from __future__ import annotations

import argparse
import logging
import os
import sys
from typing import Any

USAGE = """sunk-sandbox-operator COMMAND [ARGS]

commands:
  run                  run the operator (kopf, cluster-wide)
  doctor               check the runbook against the current cluster: doctor [NAMESPACE/NAME] [-o json|yaml]
                       (also `kubectl ssb doctor`; reads only; exit 1 when a check fails)
  why                  why is a sandbox pod not placed: why pod NAMESPACE/NAME | why namespace NAMESPACE
                       (also `kubectl ssb why`; reads only; exit 1 when a link is broken)
  runner-api-emulator  serve the CoreWeave runner API emulator (local tests, demos, dry runs)
  render-policy        print the runner policy the operator would write for a binding
  crd                  print the CustomResourceDefinition rendered from the models [-o yaml|json]
  version              print the version [-o text|json|yaml] (also --version)

`sunk-sandbox-operator COMMAND --help` for a command's flags.
"""


def _run(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="sunk-sandbox-operator run", description="Run the operator.")
    # Always on (leader election on a Lease, not kopf peering; cluster-wide); accepted so manifests can say so.
    parser.add_argument("--standalone", action="store_true", help="no kopf peering (always: a Lease elects the leader)")
    parser.add_argument("--all-namespaces", "-A", action="store_true", help="watch all namespaces (always)")
    parser.add_argument("--liveness", default=None,
                        help="serve /healthz and /readyz on this address, e.g. http://0.0.0.0:8081/healthz")
    parser.add_argument("--metrics-port", type=int, default=int(os.environ.get("SSB_METRICS_PORT", "0")),
                        help="serve Prometheus metrics on this port (0: off)")
    parser.add_argument("--metrics-address", default=None,
                        help="address the metrics server listens on (default 0.0.0.0; SSB_METRICS_ADDRESS)")
    parser.add_argument("--log-format", choices=["plain", "full", "json"], default="full",
                        help="json: one object a line, with binding, namespace, reason (pod, job) as fields")
    parser.add_argument("--log-level", choices=LOG_LEVELS, default=None,
                        help="the lowest level logged (default info; SSB_LOG_LEVEL); debug shows the libraries' "
                        "lines too, as --verbose does")
    parser.add_argument("--verbose", action="store_true", help="log everything: --log-level=debug")
    parser.add_argument("--scope-window", type=float, default=None,
                        help="extra seconds to fold namespace changes into one scope write (default 0: write at "
                        "once, fold what arrives during a write into the next)")
    parser.add_argument("--policy-propagation", type=float, default=None,
                        help="seconds after a policy write during which a new sandbox pod lacking the policy is "
                        "PlacementVerified=Unknown PolicyPropagating, not False (default 60)")
    parser.add_argument("--allowed-api-url", action="append", default=None, metavar="URL",
                        help="a runner API base URL bindings may use (repeatable; default https://api.coreweave.com; "
                        "plain http only for a loopback URL, e.g. http://127.0.0.1:* for a local emulator)")
    parser.add_argument("--allowed-slurm-url", action="append", default=None, metavar="URL",
                        help="a slurmrestd base URL bindings may name in spec.slurm.restAPI.url (repeatable; default "
                        "none: a binding naming one is NotAllowed; the same rules as --allowed-api-url; "
                        "SSB_ALLOWED_SLURM_URLS)")
    parser.add_argument("--allow-reach", action="append", default=None, metavar="NS=TARGETS",
                        help="bindings in NS (a glob) may name schedulers, scope targets and system namespaces in "
                        "TARGETS (comma-separated globs), e.g. tenant-slurm=argocd (repeatable)")
    parser.add_argument("--allow-grant", action="append", default=None, metavar="NS=NAMESPACES",
                        help="bindings in NS (a glob) may grant spec.scope.grantClusterRole in NAMESPACES (comma-separated "
                        "globs), e.g. tenant-slurm=ds-* (repeatable; default: none, no binding grants anywhere; "
                        "SSB_ALLOWED_GRANTS)")
    parser.add_argument("--allow-match-all", action="store_true", default=None,
                        help="let sandboxNamespaces match (nearly) every namespace: names: [\"*\"] (any glob without "
                        "a literal character), selector {} or only NotIn / DoesNotExist (default: refused; "
                        "SSB_ALLOW_MATCH_ALL)")
    parser.add_argument("--sandbox-namespace-selector", default=None, metavar="SELECTOR",
                        help="no binding ever matches a namespace outside this label selector (kubectl -l grammar, "
                        "e.g. the label the runner puts on its namespaces), except the binding's own namespace "
                        "(default: no bound; SSB_SANDBOX_NAMESPACE_SELECTOR)")
    parser.add_argument("--min-resync-interval", default=None, metavar="DURATION",
                        help="a binding's spec.resyncInterval below this is raised to it, and its status says so "
                        "(default 30s; SSB_MIN_RESYNC_INTERVAL)")
    parser.add_argument("--webhook-port", type=int, default=None,
                        help="serve the admission webhook (HTTPS, POST /validate) on this port, in every replica "
                        "(default 0: off; SSB_WEBHOOK_PORT)")
    parser.add_argument("--webhook-address", default=None,
                        help="address the webhook listens on (default 0.0.0.0; SSB_WEBHOOK_ADDRESS)")
    parser.add_argument("--webhook-cert-dir", default=None,
                        help="directory holding the webhook's tls.crt and tls.key, as a cert-manager Certificate's "
                        "Secret is mounted (SSB_WEBHOOK_CERT_DIR)")
    args = parser.parse_args(argv)
    from .controller import config

    config.tenancy_from_flags(args, parser.error)  # a setting that does not parse: said, and no start
    os.environ["SSB_METRICS_PORT"] = str(args.metrics_port)
    for flag, name in (("webhook_port", "SSB_WEBHOOK_PORT"), ("webhook_address", "SSB_WEBHOOK_ADDRESS"),
                       ("webhook_cert_dir", "SSB_WEBHOOK_CERT_DIR")):
        if getattr(args, flag) is not None:
            os.environ[name] = str(getattr(args, flag))
    if int(os.environ.get("SSB_WEBHOOK_PORT") or 0) and not os.environ.get("SSB_WEBHOOK_CERT_DIR"):
        parser.error("--webhook-port needs --webhook-cert-dir (a directory with tls.crt and tls.key)")
    if args.metrics_address:
        os.environ["SSB_METRICS_ADDRESS"] = args.metrics_address
    if args.scope_window is not None:
        os.environ["SSB_SCOPE_WINDOW_SECONDS"] = str(args.scope_window)
    if args.policy_propagation is not None:
        os.environ["SSB_POLICY_PROPAGATION_SECONDS"] = str(args.policy_propagation)

    from .controller import process

    kopf = process.import_kopf()
    # A plain registry: kopf's default one adds logins that import the kubernetes client and load the
    # kubeconfig a second time; handlers.login hands kopf the operator session's own credentials.
    kopf.set_default_registry(kopf.OperatorRegistry())
    level = log_level(args.log_level, args.verbose, parser.error)
    kopf.configure(verbose=level == "debug", log_format={
        "plain": kopf.LogFormat.PLAIN, "full": kopf.LogFormat.FULL, "json": kopf.LogFormat.JSON}[args.log_format])
    logging.getLogger().setLevel(level.upper())
    quiet_by_default(level == "debug")
    import asyncio

    from . import handlers  # noqa: F401  (registers the handlers)
    from .adapters.kubeconfig import ConfigError
    from .core.redact import describe
    from .controller import main

    process.limit_malloc_arenas()
    try:
        return asyncio.run(main.run(args.liveness))
    except ConfigError as exc:  # before anything started: said in one line, not a traceback
        print(f"{parser.prog}: no credentials for the API server: {describe(exc)} (in a pod: the ServiceAccount token, "
              "automountServiceAccountToken; elsewhere: KUBECONFIG or ~/.kube/config)", file=sys.stderr)
        return 2


def _version(argv: list[str]) -> int:
    from .output import OUTPUTS, render
    from . import __version__

    parser = argparse.ArgumentParser(prog="sunk-sandbox-operator version", description="Print the version.")
    parser.add_argument("-o", "--output", choices=OUTPUTS, default="text")
    args = parser.parse_args(argv)
    if args.output == "text":
        print(f"sunk-sandbox-operator {__version__}")
    else:
        sys.stdout.write(render({"version": __version__}, args.output))
    return 0


def _crd(argv: list[str]) -> int:
    from .output import render

    parser = argparse.ArgumentParser(prog="sunk-sandbox-operator crd", description="Print the CustomResourceDefinition "
                                     "rendered from the models (crds/sunksandboxbindings.yaml is this output).")
    parser.add_argument("-o", "--output", choices=["yaml", "json"], default="yaml")
    args = parser.parse_args(argv)
    from .api import crd

    sys.stdout.write(crd.render_yaml() if args.output == "yaml" else render(crd.render_crd(), "json"))
    return 0


# Libraries that log at INFO on every object event or request: kopf "Handler ... succeeded" for
# every binding event (our own status patches included), httpx one line per runner API call.
CHATTY_LOGGERS = ("kopf.objects", "httpx", "httpcore")


LOG_LEVELS = ("debug", "info", "warning", "error")


def log_level(flag: str | None, verbose: bool, error: Any) -> str:
    """--log-level, else SSB_LOG_LEVEL, else info; --verbose is debug. `error` names a bad variable."""
    if verbose:
        return "debug"
    level = (flag or os.environ.get("SSB_LOG_LEVEL") or "info").strip().lower()
    if level not in LOG_LEVELS:
        error(f"SSB_LOG_LEVEL: {level!r} is not one of {', '.join(LOG_LEVELS)}")
    return level


def quiet_by_default(verbose: bool) -> None:
    """Warnings and errors still show; `--verbose` shows everything."""
    if not verbose:
        for name in CHATTY_LOGGERS:
            logging.getLogger(name).setLevel(logging.WARNING)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help", "help"):
        print(USAGE)
        return 0
    command, rest = argv[0], argv[1:]
    if command in ("--version", "-V", "version"):
        return _version(rest)
    if command == "run":
        return _run(rest)
    if command == "doctor":
        from . import doctor
        return doctor.main(rest)
    if command == "why":
        from . import why
        return why.main(rest)
    if command == "runner-api-emulator":
        from .adapters.runnerapi import emulator
        return emulator.main(rest)
    if command == "render-policy":
        from . import render
        return render.main(rest)
    if command == "crd":
        return _crd(rest)
    print(f"unknown command {command!r}\n\n{USAGE}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())

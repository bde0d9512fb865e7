"""Command line: devcluster | demo (local-only; the operator's own CLI is `sunk-sandbox-operator`)."""

from __future__ import annotations

import sys

PROG = "python -m sunk_sandbox_devtools"
USAGE = f"""{PROG} COMMAND [ARGS]

commands:
  devcluster  up | down | env | build: a local etcd + kube-apiserver
  slurm       install | up: slurmctld + slurmd + slurmrestd (JWT) for the tests
  demo        the whole thing locally: control plane, emulator, operator, example binding
  image       build the operator image with buildah on a debootstrap base (cached)
  tools       start|build image|go: the image; helm 3 and 4, promtool, argocd-health, the oldest
              kube-apiserver (start: in the background)
  chart       sync: write the Helm chart's copies (CRD, alerts, dashboard), appVersion, the values table of docs/configuration.md
  release     build the release artifacts into dist/ (chart, image archive, SBOM, wheel, kubectl plugin, krew)
  registry    build: the OCI registry of the release test (distribution, from hack/registry; cached)
"""


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help", "help"):
        print(USAGE)
        return 0
    command, rest = argv[0], argv[1:]
    if command == "devcluster":
        from . import devcluster
        return devcluster.main(rest)
    if command == "chart":
        from . import chart
        return chart.main(rest)
    if command == "slurm":
        from . import slurm
        return slurm.main(rest)
    if command == "image":
        from . import image
        return image.main(rest)
    if command == "tools":
        from . import tools
        return tools.main(rest)
    if command == "release":
        from . import release
        return release.main(rest)
    if command == "registry":
        if rest != ["build"]:
            print(f"usage: {PROG} registry build", file=sys.stderr)
            return 2
        from . import registry
        print(registry.ensure_registry())
        return 0
    if command == "demo":
        from . import demo
        return demo.main(rest)
    print(f"unknown command {command!r}\n\n{USAGE}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())

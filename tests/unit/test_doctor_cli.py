"""The doctor's command line without a cluster: flags become the spec a binding would have, usage
errors exit 2 before anything is read, and the kubectl plugin hands over to it."""

from __future__ import annotations

from decimal import Decimal

import pytest

from sunk_sandbox_operator import doctor
from sunk_sandbox_operator.api.spec import parse_spec


def parse(*argv: str):
    parser = doctor._parser()
    return parser, parser.parse_args(list(argv))


def test_the_flags_make_the_spec_a_binding_would_have() -> None:
    parser, args = parse("--scheduler-namespace", "slurm", "--scheduler-selector", "app=sched,tier in (a,b)",
                         "--runner-id", "r1", "--token-secret", "slurm/api:tok", "--sandbox-namespaces", "ds-*,team-*",
                         "--partition", "cpu", "--slurm-url", "https://rest:6820", "--slurm-user", "k8sop",
                         "--slurm-token-secret", "slurm/jwt", "--expected-grace", "300")
    raw, token, slurm_token = doctor._prerequisites(args, parser)
    spec = parse_spec(raw)
    assert (token, slurm_token) == (("slurm", "api", "tok"), ("slurm", "jwt", "token"))
    assert spec.scheduler.namespace == "slurm" and spec.sandbox_namespaces.names == ["ds-*", "team-*"]
    assert [e.operator for e in spec.scheduler.pod_selector.match_expressions] == ["In", "In"]
    assert spec.slurm.rest_api is not None and spec.slurm.rest_api.token_secret_ref.name == "jwt"
    assert (spec.partition, spec.expected_grace_period_seconds) == ("cpu", 300)


@pytest.mark.parametrize("argv, says", [
    (["--runner-id", "r"], "--runner-id and --token-secret go together"),
    (["--runner-id", "r", "--token-secret", "no-namespace"], "NAMESPACE/NAME[:KEY]"),
    (["--slurm-url", "https://x"], "--slurm-url, --slurm-user and --slurm-token-secret go together"),
    (["--scheduler-selector", "=x"], "--scheduler-selector"),
])
def test_bad_prerequisite_flags_are_usage_errors(argv, says, capsys) -> None:
    parser, args = parse(*argv)
    with pytest.raises(SystemExit) as exc:
        doctor._prerequisites(args, parser)
    assert exc.value.code == 2 and says in capsys.readouterr().err


def test_a_binding_takes_nothing_from_the_prerequisite_flags(capsys) -> None:
    with pytest.raises(SystemExit) as exc:
        doctor.main(["ns/b", "--runner-id", "r", "--partition", "p"])
    assert exc.value.code == 2 and "--runner-id, --partition: a binding's checks take everything from its spec" \
        in capsys.readouterr().err


def test_sandbox_requests() -> None:
    parser, _ = parse()
    need = doctor._requests("cpu=250m, memory=1Gi", parser)
    assert (need.cpu, need.memory) == (Decimal("0.25"), Decimal(2**30))
    with pytest.raises(SystemExit):
        doctor._requests("gpu=1", parser)


def test_the_kubectl_plugin_runs_the_doctor_and_says_how_otherwise(capsys) -> None:
    assert doctor.kubectl_plugin([]) == 0 and "kubectl ssb doctor" in capsys.readouterr().err
    assert doctor.kubectl_plugin(["status"]) == 2
    with pytest.raises(SystemExit) as exc:
        doctor.kubectl_plugin(["doctor", "--help"])
    assert exc.value.code == 0 and capsys.readouterr().out.startswith("usage: kubectl ssb doctor")


def test_a_line_is_its_mark_its_detail_and_a_failure_its_fix() -> None:
    from sunk_sandbox_operator.core.doctor.facts import Result

    assert doctor._line(Result("x", "scope", True, "fine")) == "✓ scope: fine"
    assert doctor._line(Result("x", "scope", False, "missing ds-a", "list it")) == "✗ scope: missing ds-a — fix: list it"
    assert doctor._line(Result("x", "partition", None, "not asked", "unused")) == "- partition: not asked"

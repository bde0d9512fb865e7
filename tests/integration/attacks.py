"""What a namespace user who may create bindings tries, and the field the refusal must name.

Shared by the controller test (no webhook: refused with a NotAllowed condition, nothing written,
no token sent) and the webhook test (denied at `kubectl apply`). Each attack is a change to a
valid binding spec; `{attacker}`, `{victim}` and `{ns}` are filled in by the test.
"""

from __future__ import annotations

import copy

ATTACKS: list[tuple[str, dict, str]] = [
    ("token to a loopback server of the author's", {"runner": {"apiURL": "{attacker}"}}, "spec.runner.apiURL"),
    ("token to another host", {"runner": {"apiURL": "https://evil.example.com"}}, "spec.runner.apiURL"),
    ("token to a look-alike host", {"runner": {"apiURL": "https://api.coreweave.com.evil.example.com"}},
     "spec.runner.apiURL"),
    ("token over plain http", {"runner": {"apiURL": "http://api.coreweave.com"}}, "spec.runner.apiURL"),
    ("token to another port", {"runner": {"apiURL": "https://api.coreweave.com:8443"}}, "spec.runner.apiURL"),
    ("another tenant's scheduler", {"scheduler": {"namespace": "{victim}"}}, "spec.scheduler.namespace"),
    ("a scheduler in kube-system", {"scheduler": {"namespace": "kube-system"}}, "spec.scheduler.namespace"),
    ("an Argo CD Application in argocd",
     {"scope": {"target": {"kind": "ArgoCDApplication", "application": {"name": "slurm", "namespace": "argocd"}}}},
     "spec.scope.target.application.namespace"),
    ("a Flux HelmRelease in another tenant's namespace",
     {"scope": {"target": {"kind": "FluxHelmRelease", "helmRelease": {"name": "slurm", "namespace": "{victim}"}}}},
     "spec.scope.target.helmRelease.namespace"),
    ("an empty namespace selector (every namespace)", {"sandboxNamespaces": {"selector": {}, "names": []}},
     "spec.sandboxNamespaces.selector"),
    ("kube-system as a sandbox namespace", {"sandboxNamespaces": {"names": ["kube-system"]}},
     "spec.sandboxNamespaces.names[0]"),
    ("kube-system always in the scope", {"scope": {"alwaysInclude": ["kube-system"]}}, "spec.scope.alwaysInclude[0]"),
    ("the operator's namespace in the scope", {"scope": {"alwaysInclude": ["sunk-sandbox-operator-system"]}},
     "spec.scope.alwaysInclude[0]"),
    ("cluster-admin for the scheduler", {"scope": {"grantClusterRole": "cluster-admin"}}, "spec.scope.grantClusterRole"),
    ("every pod's ServiceAccount granted and Deployment rolled", {"scheduler": {"podSelector": {}}},
     "spec.scheduler.podSelector"),
    # Match-everything selectors that are not `{}` (refused unless SSB_ALLOW_MATCH_ALL).
    ("every namespace by the glob *", {"sandboxNamespaces": {"names": ["*"]}}, "spec.sandboxNamespaces.names[0]"),
    ("every namespace by the glob ?*", {"sandboxNamespaces": {"names": ["?*"]}}, "spec.sandboxNamespaces.names[0]"),
    ("every namespace without a label nobody has (DoesNotExist only)",
     {"sandboxNamespaces": {"names": [], "selector": {"matchExpressions": [
         {"key": "nobody-has-this", "operator": "DoesNotExist"}]}}}, "spec.sandboxNamespaces.selector"),
    ("every namespace but one team's (NotIn only)",
     {"sandboxNamespaces": {"names": [], "selector": {"matchExpressions": [
         {"key": "team", "operator": "NotIn", "values": ["victim"]}]}}}, "spec.sandboxNamespaces.selector"),
    ("every pod without a label nobody has (DoesNotExist-only scheduler pod selector)",
     {"scheduler": {"podSelector": {"matchExpressions": [{"key": "nobody-has-this", "operator": "DoesNotExist"}]}}},
     "spec.scheduler.podSelector"),
    # The test operator allows https://gw.example.com/runner (tests/conftest.py GATEWAY_API).
    ("token to another path of an allowed host (/runner/../admin)",
     {"runner": {"apiURL": "https://gw.example.com/runner/../admin"}}, "spec.runner.apiURL"),
    ("token to another path of an allowed host (percent-encoded dots)",
     {"runner": {"apiURL": "https://gw.example.com/runner/%2e%2e/admin"}}, "spec.runner.apiURL"),
]


def alias_bomb(levels: int = 9) -> str:
    """Top-level YAML rows for a tenant's own document: `levels` levels of nine aliases of the level
    below, 9**levels strings if expanded (9: the "billion laughs", 387 million) in about 55 bytes a level."""
    rows = ["l0: &l0 [lol, lol, lol, lol, lol, lol, lol, lol, lol]"]
    rows += [f"l{i}: &l{i} [" + ", ".join([f"*l{i - 1}"] * 9) + "]" for i in range(1, levels)]
    return "\n".join(rows) + "\n"


def _fill(value, subs: dict[str, str]):
    if isinstance(value, str):
        return value.format(**subs)
    if isinstance(value, dict):
        return {k: _fill(v, subs) for k, v in value.items()}
    if isinstance(value, list):
        return [_fill(v, subs) for v in value]
    return value


def _merge(base: dict, change: dict) -> dict:
    out = copy.deepcopy(base)
    for key, value in change.items():
        if isinstance(value, dict) and value and isinstance(out.get(key), dict):
            out[key] = _merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def attack_spec(base: dict, change: dict, **subs: str) -> dict:
    """The valid spec `base` with the attack's change applied (`{}` replaces, dicts merge)."""
    return _merge(base, _fill(change, subs))

"""With no admission webhook, the controller refuses what a binding may not ask (real control plane,
the operator as its ServiceAccount, the runner API emulator and a loopback "attacker" server):
every attack gets Ready=False NotAllowed naming the field, nothing is written anywhere, no token
is sent to anyone."""

from __future__ import annotations

import http.server
import threading
import uuid
from typing import Iterator

import pytest
import yaml

from tests.conftest import assert_stays
from tests.integration.attacks import ATTACKS, attack_spec
from tests.integration.conftest import (ADMIN_TOKEN, binding_spec, calls, create_token_secret, grant_secret_read,
                                        make_scheduler, new_runner)

pytestmark = pytest.mark.integration


class Recorder(http.server.BaseHTTPRequestHandler):
    seen: list[tuple[str, str, dict]] = []

    def _record(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        self.rfile.read(length)
        Recorder.seen.append((self.command, self.path, dict(self.headers)))
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        self.wfile.write(b"{}")

    do_GET = do_POST = do_PUT = _record

    def log_message(self, *args) -> None:
        pass


@pytest.fixture(scope="module")
def attacker() -> Iterator[str]:
    """The binding author's own server on loopback. The test operator allows http://127.0.0.1:* (the
    emulator); the attacker listens on 127.0.0.2, another loopback address the setting does not name."""
    server = http.server.ThreadingHTTPServer(("127.0.0.2", 0), Recorder)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.2:{server.server_address[1]}"
    finally:
        server.shutdown()


@pytest.fixture(scope="module")
def victim(installed) -> str:
    """Another tenant's namespace with its scheduler and its list."""
    ns = "victim-" + uuid.uuid4().hex[:6]
    installed.create_namespace(ns)
    make_scheduler(installed, ns, scope_namespaces=[ns])
    return ns


def cm_version(kube, ns: str) -> str:
    return kube.core.read_namespaced_config_map("slurm-scheduler-config", ns).metadata.resource_version


@pytest.mark.parametrize("what,change,field", ATTACKS, ids=[a[0] for a in ATTACKS])
def test_the_controller_refuses_the_attack(installed, operator, emulator, attacker, victim, ns, what, change, field):
    grant_secret_read(installed, ns)
    create_token_secret(installed, ns)
    make_scheduler(installed, ns, scope_namespaces=[ns])
    runner = new_runner(emulator, {})
    spec = attack_spec(binding_spec(runner, emulator, sandboxNamespaces={"names": ["ds-attack-*"]}), change,
                       attacker=attacker, victim=victim, ns=ns)
    mine, theirs = cm_version(installed, ns), cm_version(installed, victim)
    installed.create_binding(ns, "b", spec)
    cond = installed.wait_condition(ns, "b", "Ready", "False", timeout=30)
    policy = installed.condition(ns, "b", "PolicySynced")
    assert policy["reason"] == "NotAllowed" and f"{field}:" in policy["message"], policy

    def nothing_happened() -> None:
        assert Recorder.seen == [], "a request reached the attacker's server"
        assert calls(emulator, runner) == [], "the runner API was called"
        assert cm_version(installed, ns) == mine and cm_version(installed, victim) == theirs
        rbs = installed.rbac.list_role_binding_for_all_namespaces(label_selector="sunksandbox.dev/binding").items
        assert not [rb for rb in rbs if rb.metadata.labels.get("sunksandbox.dev/binding") == f"{ns}.b"]
    assert_stays(nothing_happened, 2)
    assert cond["status"] == "False"
    # The token never appears in what the operator wrote (status, events).
    status = yaml.safe_dump(installed.binding(ns, "b").get("status"))
    events = yaml.safe_dump([e.message for e in installed.core.list_namespaced_event(ns).items])
    assert ADMIN_TOKEN not in status and ADMIN_TOKEN not in events

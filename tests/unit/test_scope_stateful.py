"""A stateful property test over the scope shell (issue 20): hypothesis drives namespaces that come,
change labels and go, admins who edit the list, lost races and restarts of the operator, over the
in-memory harness (the fake Kube, the injected clock). After every step the invariants hold:

- the list holds every sandbox namespace and every alwaysInclude entry;
- no entry an admin put there is ever removed by the operator;
- the ledger the target carries is what the list shows: what it says we added is listed, and every
  name we listed is in it (nothing we added is forgotten);
- our RoleBindings are in exactly the listed namespaces we may grant in;
- the scheduler is rolled at most once per `scope.minRollInterval`, across restarts too, and an
  interval after a change it runs the list.
"""

from __future__ import annotations

import asyncio

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from sunk_sandbox_operator.api.keys import SCOPE_HASH_ANNOTATION, SCOPE_LEDGER_ANNOTATION
from sunk_sandbox_operator.controller import scope, watch
from sunk_sandbox_operator.controller.config import Config
from sunk_sandbox_operator.controller.status_writer import flush
from sunk_sandbox_operator.core import ledger as lg
from sunk_sandbox_operator.core.grants import selector
from sunk_sandbox_operator.core.scope import scope_hash
from sunk_sandbox_operator.core.scope_doc import read_list

from tests.unit.fakes import FakeKube, Harness, binding_body, namespace, selector_matches
from tests.unit.test_scope_controller import DEPLOYMENT, PATH

NAMES = [f"ds-{i}" for i in range(6)] + ["other-1", "other-2"]
ADMIN = ["admin-a", "admin-b"]
ALWAYS = {"slurm"}
INTERVAL = 30.0
SPEC = {"sandboxNamespaces": {"names": ["ds-*"], "selector": {"matchLabels": {"sbx": "yes"}}},
        "scope": {"alwaysInclude": sorted(ALWAYS), "minRollInterval": f"{INTERVAL:.0f}s",
                  "grantClusterRole": "sunk-scheduler-sandbox"}}
DOWNTIMES = [0.7, 1.0, 31.0]  # seconds between a process' end and its successor's start (clocks have fractions)
CONF = "scheduler:\n  scope:\n    type: namespace\n    namespaces: [slurm]\n"


class ScopeShell(RuleBasedStateMachine):
    @initialize()
    def start(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.kube = FakeKube()
        self.rolls: list[float] = []
        self.labels: dict[str, dict] = {}          # the namespaces that exist, with their labels
        self.admins: set[str] = set()              # entries an admin put in the list and still wants
        self.parsed: tuple[str, list[str]] | None = None  # (resourceVersion, list) of the ConfigMap
        self.kube.add("namespaces", namespace("slurm"))
        self.kube.add("configmaps", {"apiVersion": "v1", "kind": "ConfigMap",
                                     "metadata": {"namespace": "slurm", "name": "cm"},
                                     "data": {"scheduler.conf": CONF}})
        self.kube.add("deployments", DEPLOYMENT)
        self.harness: Harness | None = None
        original = self.kube.merge_patch_deployment

        async def recording(ns: str, name: str, patch: dict) -> dict:  # every roll, on the current clock
            self.rolls.append(self.harness.clock.now)
            return await original(ns, name, patch)
        self.kube.merge_patch_deployment = recording  # type: ignore[method-assign]
        self.boot(at=1000.0)

    def boot(self, at: float) -> None:
        """A (re)started operator: a new Context over the same API server state, the status it wrote."""
        old = self.harness
        if old is not None:
            self.run(old.close())
        h = Harness(config=Config(), kube=self.kube)
        h.clock.now = at
        h.ctx.namespaces.load(h.kube.store["namespaces"].values())
        stored = self.kube.store["bindings"].get(("slurm", "b"))
        self.state = h.binding(stored or binding_body(**SPEC), stored=stored is None)
        self.harness = h
        self.settle(periodic=True)

    def run(self, coro):
        return self.loop.run_until_complete(coro)

    def settle(self, periodic: bool = False, event=None) -> None:
        """Deliver `event` (a watch callback) on the loop, then let every sync it starts finish."""
        h = self.harness

        async def go() -> None:
            if event is not None:
                event()
            if periodic:
                self.state.report(await h.drive(scope.sync(h.ctx, self.state)))
            await h.run_until_idle(horizon=5.0)
            await flush(h.ctx, self.state)  # status as a reconcile writes it (a restart reads it back)
        self.run(go())

    # ------------------------------------------------------------ the world

    @rule(name=st.sampled_from(NAMES), sbx=st.booleans())
    def namespace_created_or_relabelled(self, name: str, sbx: bool) -> None:
        labels = {"sbx": "yes"} if sbx else {}
        kind = "MODIFIED" if name in self.labels else "ADDED"
        self.labels[name] = labels
        body = self.kube.add("namespaces", namespace(name, labels))
        self.settle(event=lambda: watch.on_namespace(self.harness.ctx, kind, body))

    @rule(name=st.sampled_from(NAMES))
    def namespace_deleted(self, name: str) -> None:
        if name not in self.labels:
            return
        body = self.kube.store["namespaces"].pop(("", name))
        for key in [key for key in self.kube.store["rolebindings"] if key[0] == name]:
            del self.kube.store["rolebindings"][key]  # the API server deletes what the namespace held
        del self.labels[name]
        self.settle(event=lambda: watch.on_namespace(self.harness.ctx, "DELETED", body))

    @rule(entry=st.sampled_from(ADMIN))
    def admin_adds_an_entry(self, entry: str) -> None:
        self.edit_list(lambda values: values + [entry] if entry not in values else values)
        self.admins.add(entry)
        self.settle(periodic=True)

    @rule(entry=st.sampled_from(ADMIN))
    def admin_removes_their_entry(self, entry: str) -> None:
        self.edit_list(lambda values: [v for v in values if v != entry])
        self.admins.discard(entry)
        self.settle(periodic=True)

    @rule(entry=st.sampled_from(ADMIN))
    def an_admins_edit_races_our_write(self, entry: str) -> None:
        """Lost race: the admin writes between our read and our write (the write's precondition fails)."""
        def admin() -> None:
            self.edit_list(lambda values: values + [entry] if entry not in values else values)
            self.admins.add(entry)
        self.kube.before("replace_configmap", admin)
        self.settle(periodic=True)
        self.kube._before.pop("replace_configmap", None)  # unused if nothing needed writing

    @rule(seconds=st.sampled_from([0.5, 1.0, 5.0, 31.0]))
    def time_passes(self, seconds: float) -> None:
        self.run(self.harness.clock.advance(seconds))  # a folded roll may come due
        self.settle()
        if seconds > INTERVAL:
            self.the_scheduler_runs_the_list()

    @rule()
    def a_resync(self) -> None:
        self.settle(periodic=True)

    @rule(downtime=st.sampled_from(DOWNTIMES))
    def the_operator_restarts(self, downtime: float) -> None:
        self.boot(at=self.harness.clock.now + downtime)

    # ------------------------------------------------------------ helpers

    def listed(self) -> list[str]:
        cm = self.kube.store["configmaps"][("slurm", "cm")]
        rv = cm["metadata"]["resourceVersion"]  # every write bumps it: parse each version once
        if self.parsed is None or self.parsed[0] != rv:
            self.parsed = (rv, read_list(cm["data"]["scheduler.conf"], PATH).values or [])
        return list(self.parsed[1])

    def edit_list(self, change) -> None:
        def edit(cm: dict) -> None:
            values = read_list(cm["data"]["scheduler.conf"], PATH).values or []
            new = change(list(values))
            cm["data"]["scheduler.conf"] = "scheduler:\n  scope:\n    type: namespace\n    namespaces: [" + \
                ", ".join(new) + "]\n"
        self.kube.edit("configmaps", "slurm", "cm", edit)

    def sandbox(self) -> set[str]:
        return {n for n, labels in self.labels.items() if n.startswith("ds-") or labels.get("sbx") == "yes"}

    def ledger(self) -> lg.Entry | None:
        annotations = self.kube.get("configmaps", "slurm", "cm")["metadata"].get("annotations") or {}
        return lg.decode(annotations.get(SCOPE_LEDGER_ANNOTATION)).get("slurm/b")

    # ------------------------------------------------------------ invariants

    @invariant()
    def every_sandbox_namespace_and_always_include_is_listed(self) -> None:
        missing = (self.sandbox() | ALWAYS) - set(self.listed())
        assert not missing, (missing, self.listed())

    @invariant()
    def no_admin_entry_is_ever_removed(self) -> None:
        assert self.admins <= set(self.listed()), (self.admins, self.listed())

    @invariant()
    def the_ledger_is_what_the_list_shows(self) -> None:
        """Besides the admins' entries and alwaysInclude (there before us), the list holds what we
        added, and the ledger records exactly that: a name we listed and forgot would outlive us."""
        entry = self.ledger()
        added = set(entry.added) if entry is not None else set()
        assert added == set(self.listed()) - self.admins - ALWAYS, (sorted(added), self.listed(), self.admins)

    @invariant()
    def our_rolebindings_are_where_we_may_grant(self) -> None:
        """A RoleBinding for the scheduler in each listed namespace the binding matches (and in its
        alwaysInclude), none elsewhere: none missing, none left behind, none made twice."""
        label = selector("slurm", "b")
        granted = {ns for (ns, _), rb in self.kube.store["rolebindings"].items()
                   if selector_matches(label, rb["metadata"].get("labels"))}
        want = (self.sandbox() | ALWAYS) & set(self.listed())
        assert granted == want, (sorted(granted), sorted(want))

    @invariant()
    def at_most_one_roll_per_interval(self) -> None:
        assert all(b - a >= INTERVAL - 1e-6 for a, b in zip(self.rolls, self.rolls[1:])), self.rolls

    def the_scheduler_runs_the_list(self) -> None:
        """An interval after the last change, the scheduler has been rolled onto the list, once the
        operator has put anything there (before that, what it runs is the admins' business)."""
        template = self.kube.get("deployments", "slurm", "slurm-scheduler")["spec"]["template"]
        rolled_for = (template["metadata"].get("annotations") or {}).get(SCOPE_HASH_ANNOTATION)
        if rolled_for is not None or set(self.listed()) - self.admins - ALWAYS:
            assert rolled_for == scope_hash(self.listed()), (rolled_for, self.listed(), self.rolls)

    def teardown(self) -> None:
        if getattr(self, "harness", None) is not None:
            self.run(self.harness.close())
        if getattr(self, "loop", None) is not None:
            self.loop.close()


ScopeShell.TestCase.settings = settings(max_examples=60, stateful_step_count=30, deadline=None,
                                        suppress_health_check=[HealthCheck.too_slow])
test_scope_shell = ScopeShell.TestCase

"""A stateful property test over the scope shell (issue 20): hypothesis drives namespaces that come,
change labels and go, admins who edit the list, lost races, restarts of the operator, and deaths at
every failpoint the scope path reaches, over the in-memory harness (the fake Kube, the injected
clock). After every step the invariants hold:

- the list holds every sandbox namespace and every alwaysInclude entry;
- no entry an admin put there is ever removed by the operator;
- the ledger the target carries is what the list shows: what it says we added is listed, and every
  name we listed is in it (nothing we added is forgotten, even by a process that died);
- our RoleBindings are in exactly the listed namespaces we may grant in;
- the scheduler is rolled at most once per `scope.minRollInterval`, across restarts too, and an
  interval after a change it runs the list.

A death (`controller/failpoints.py`, as tests/integration/test_crash.py uses them on the real
process): the armed failpoint's exit raises, every task of that process is cancelled at once (it
runs nothing more, flushes nothing: a SIGKILL), and a fresh process starts from what the API server
holds — the target with its ledger, the binding with the status last written.
"""

from __future__ import annotations

import asyncio

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import event as statistic
from hypothesis import strategies as st
from hypothesis.control import currently_in_test_context
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from sunk_sandbox_operator.api.keys import SCOPE_HASH_ANNOTATION, SCOPE_LEDGER_ANNOTATION
from sunk_sandbox_operator.controller import scope, watch
from sunk_sandbox_operator.controller.failpoints import EXIT_CODE, NAMES as ALL_FAILPOINTS, Failpoints
from sunk_sandbox_operator.controller.status_writer import flush
from sunk_sandbox_operator.core import ledger as lg
from sunk_sandbox_operator.core.grants import selector
from sunk_sandbox_operator.core.scope import scope_hash
from sunk_sandbox_operator.core.scope_doc import read_list

from tests.unit.fakes import FakeKube, Harness, binding_body, namespace, selector_matches, settle as turns
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
# The failpoints a scope sync reaches (the policy wing's two are not on this path);
# test_the_scope_path_reaches_exactly_these_failpoints keeps it equal to what the operator hits.
SCOPE_FAILPOINTS = ("after-scope-write", "after-rolebinding-create", "before-status-flush")


class Died(BaseException):
    """The process exited at a failpoint. A BaseException, as SIGKILL is beyond `except Exception`:
    no handler of the operator's reports it and carries on."""


class ScopeShell(RuleBasedStateMachine):
    @initialize()
    def start(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.kube = FakeKube()
        self.rolls: list[float] = []
        self.labels: dict[str, dict] = {}          # the namespaces that exist, with their labels
        self.admins: set[str] = set()              # entries an admin put in the list and still wants
        self.armed: tuple[str, float] | None = None  # (failpoint, downtime) of the running process
        self.dying: list[asyncio.Task] = []        # the task that reached it (its Died is retrieved)
        self.deaths: list[str] = []                # the failpoints the operator died at, in order
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

    def boot(self, at: float, dead: bool = False) -> None:
        """A (re)started operator: a new Context over the same API server state, the status it wrote.
        A process that stopped (`dead=False`) shuts down first; a dead one left nothing to close."""
        old = self.harness
        if old is not None and not dead:
            self.run(old.close())
        h = Harness(kube=self.kube)
        h.clock.now = at
        h.ctx.namespaces.load(h.kube.store["namespaces"].values())
        stored = self.kube.store["bindings"].get(("slurm", "b"))
        self.state = h.binding(stored or binding_body(**SPEC), stored=stored is None)
        self.harness, self.armed = h, None  # a fresh process: no failpoint armed
        self.settle(periodic=True)

    def run(self, coro) -> None:
        """Run `coro` on the loop; when the process dies at a failpoint meanwhile, restart it."""
        try:
            self.loop.run_until_complete(coro)
        except (Died, asyncio.CancelledError):  # the dying task, or one the death cancelled
            if not self.dying:
                raise
        if self.dying:
            self.restart_after_death()

    def die(self, code: int) -> None:
        """The armed failpoint's exit: the process is gone at this very point. Every other task of it
        is cancelled before it can take another step (no status flush, no roll, no timer)."""
        assert code == EXIT_CODE and self.armed is not None
        me = asyncio.current_task()
        assert me is not None
        for task in asyncio.all_tasks():
            if task is not me:
                task.cancel()
        self.dying.append(me)
        raise Died(self.armed[0])

    def restart_after_death(self) -> None:
        async def unwind() -> None:
            await turns()
        self.loop.run_until_complete(unwind())  # the cancelled tasks end (none of them writes)
        left = [t.get_name() for t in asyncio.all_tasks(self.loop) if not t.done()]
        assert not left, f"tasks of the dead process still running: {left}"
        for task in self.dying:
            assert isinstance(task.exception(), Died), task  # retrieved: it died where it was armed
        assert self.armed is not None
        point, downtime = self.armed
        self.dying.clear()
        self.deaths.append(point)
        if currently_in_test_context():  # (statistics: --hypothesis-show-statistics)
            statistic(f"died at {point}")
        # What must hold at any instant holds at the moment of death too (the list and its ledger
        # travel in one write; an admin's entry is never touched; rolls are rationed).
        self.no_admin_entry_is_ever_removed()
        self.the_ledger_is_what_the_list_shows()
        self.at_most_one_roll_per_interval()
        self.boot(at=self.harness.clock.now + downtime, dead=True)

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

    @rule(point=st.sampled_from(SCOPE_FAILPOINTS), nth=st.integers(1, 2), downtime=st.sampled_from(DOWNTIMES),
          arrives=st.one_of(st.none(), st.sampled_from(NAMES)))
    def a_failpoint_is_armed(self, point: str, nth: int, downtime: float, arrives: str | None) -> None:
        """SSB_FAILPOINTS=point=nth on the running process: it dies the nth time a sync reaches the
        point and starts again `downtime` seconds later. A sync runs into it at once when a sandbox
        namespace `arrives`, else in whichever later step reaches it."""
        self.harness.ctx.failpoints = Failpoints(f"{point}={nth}", exit=self.die)
        self.armed = (point, downtime)
        if arrives is not None:
            self.namespace_created_or_relabelled(arrives, True)

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
        if getattr(self, "harness", None) is not None and not self.dying:
            self.run(self.harness.close())
        if getattr(self, "loop", None) is not None:
            self.loop.close()


ScopeShell.TestCase.settings = settings(max_examples=60, stateful_step_count=30, deadline=None,
                                        suppress_health_check=[HealthCheck.too_slow])
test_scope_shell = ScopeShell.TestCase


@pytest.fixture(name="shell")
def shell_fixture():
    """The machine started (the operator has booted over the world), torn down after the test."""
    shell = ScopeShell()
    shell.start()
    yield shell
    shell.teardown()


def test_the_scope_path_reaches_exactly_these_failpoints(shell: ScopeShell) -> None:
    """SCOPE_FAILPOINTS is what a scope sync reaches (a namespace added: the write, a grant, the
    status), and each is one the operator knows: a failpoint added to the path joins the rule."""
    reached: list[str] = []

    class Recording(Failpoints):
        def hit(self, name: str) -> None:
            reached.append(name)

    shell.harness.ctx.failpoints = Recording()
    shell.namespace_created_or_relabelled("ds-1", False)
    assert set(reached) == set(SCOPE_FAILPOINTS) and set(SCOPE_FAILPOINTS) <= set(ALL_FAILPOINTS), reached


def dies_at(shell: ScopeShell, point: str) -> None:
    """The operator dies at `point` while ds-1 arrives; its successor starts a second later."""
    shell.a_failpoint_is_armed(point, 1, 1.0, "ds-1")
    assert shell.deaths == [point]


@pytest.mark.parametrize("point", SCOPE_FAILPOINTS)
def test_after_a_death_the_namespace_is_listed_recorded_granted_and_rolled(shell: ScopeShell, point: str) -> None:
    dies_at(shell, point)
    shell.every_sandbox_namespace_and_always_include_is_listed()
    shell.the_ledger_is_what_the_list_shows()
    shell.our_rolebindings_are_where_we_may_grant()
    shell.time_passes(31.0)  # the scheduler runs ds-1 an interval later at the latest
    assert len(shell.rolls) == 1, shell.rolls


@pytest.mark.parametrize("point", SCOPE_FAILPOINTS)
def test_after_a_death_the_next_roll_still_waits_for_the_interval(shell: ScopeShell, point: str) -> None:
    dies_at(shell, point)
    shell.namespace_created_or_relabelled("ds-2", True)  # a second after the restart
    shell.at_most_one_roll_per_interval()
    shell.time_passes(31.0)
    assert "ds-2" in shell.ledger().added, shell.ledger()


def test_a_roll_inside_the_second_status_records_still_paces_the_successor(shell: ScopeShell) -> None:
    """status.scope.lastRollTime has whole seconds: a roll at 1000.5 reads back, in the process that
    starts at 1001.2, as made at 1000. The successor's next roll is still due at 1030.5 at the earliest."""
    shell.time_passes(0.5)
    shell.namespace_created_or_relabelled("ds-1", True)   # rolled at 1000.5
    shell.the_operator_restarts(0.7)
    shell.namespace_created_or_relabelled("ds-2", True)   # folded into the interval's end
    shell.time_passes(31.0)
    assert len(shell.rolls) == 2, shell.rolls
    shell.at_most_one_roll_per_interval()

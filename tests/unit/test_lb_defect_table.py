"""The reference LB's table of defects: one row per defect, each acting at hook points that exist,
and a hook point that no active defect acts at gives the healthy value back untouched. What each
defect does to traffic is proven in the lab (``tests/lab/test_lb_defects.py``); here, the table's
own logic and the decisions the controller's jobs hand it."""

from __future__ import annotations

import time

import pytest

from lbconform_lab.lb import defects, flows, params
from lbconform_lab.lb.defects import DEFECTS, HOOKS, TABLE, At, Checked, Pace, PoolHistory, apply
from lbconform_lab.lb.model import Backend, HealthTarget, ServicePlan
from lbconform_lab.lb.params import Params

UNCHANGED = object()


def acting_at(hook: defects.Hook[object, object]) -> set[str]:
    return {d.name for d in TABLE if any(a.hook is hook for a in d.acts)}


def test_every_defect_has_exactly_one_row_and_params_names_the_same_table() -> None:
    names = [d.name for d in TABLE]
    assert len(names) == len(set(names))
    assert params.DEFECTS is DEFECTS and list(DEFECTS) == names


def test_every_defect_acts_at_hooks_that_exist_and_every_hook_has_a_defect() -> None:
    for d in TABLE:
        assert d.acts, d.name
        assert all(a.hook in HOOKS for a in d.acts), d.name
    assert {a.hook for d in TABLE for a in d.acts} == set(HOOKS)
    assert len({h.name for h in HOOKS}) == len(HOOKS)


@pytest.mark.parametrize("hook", HOOKS, ids=lambda h: h.name)
def test_a_hook_without_its_defects_gives_the_healthy_value_back(hook: defects.Hook[object, object]) -> None:
    assert apply(hook, UNCHANGED, frozenset(), None) is UNCHANGED
    assert apply(hook, UNCHANGED, frozenset(DEFECTS) - acting_at(hook), None) is UNCHANGED


def test_defects_at_one_hook_change_the_value_in_the_tables_order() -> None:
    # ignore-health passes every backend; never-healthy-again, later in the table, fails it again
    found = Checked(found_unhealthy=True, changed_at=None, joined=None, was_healthy=False, now=0.0)
    assert apply(At.PASSING, False, {"ignore-health"}, found)
    assert not apply(At.PASSING, False, {"ignore-health", "never-healthy-again"}, found)
    # sticky-source-ranges brings the last ranges back; ranges-drop-all, later, then admits nobody
    last = ServicePlan(key="ns/a", index=1, vip="198.18.0.1", mode="node", rules=(), affinity=False,
                       source_ranges=("192.0.2.0/24",), idle_timeout=240, tcp_reset=False, snat=False)
    assert apply(At.SOURCE_RANGES, (), {"sticky-source-ranges"}, last) == ("192.0.2.0/24",)
    assert apply(At.SOURCE_RANGES, (), {"ranges-drop-all"}, last) == ()
    both = {"sticky-source-ranges", "ranges-drop-all"}
    assert apply(At.SOURCE_RANGES, (), both, last) == (defects.ADMITS_NOBODY,)
    assert apply(At.SOURCE_RANGES, ("198.51.100.0/24",), {"ignore-source-ranges", "sticky-source-ranges"},
                 last) == ("192.0.2.0/24",)


def test_which_flows_a_change_forgets() -> None:
    drain, reset, pod = Params(), Params(backend_removal="reset"), Params(mode="pod")
    assert [flows.on_change(p) for p in (drain, reset, pod)] == ["nothing", "removed", "removed-udp"]

    def forgets(p: Params, *names: str) -> defects.Forget:
        return apply(At.FORGET, flows.on_change(p), set(names))

    assert forgets(drain, "no-pinning") == forgets(pod, "reset-on-change") == "every"
    assert forgets(drain, "no-drain") == forgets(pod, "no-drain") == "removed"
    assert forgets(pod, "udp-stale") == "nothing" and forgets(reset, "udp-stale") == "removed"
    assert forgets(pod, "no-drain", "udp-stale") == "removed"


def test_the_health_decisions_of_the_timed_defects(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(time, "monotonic", lambda: 100.0)

    def backend(**changes: object) -> Checked:
        base: dict[str, object] = {"found_unhealthy": False, "changed_at": None, "joined": None,
                                   "was_healthy": True, "now": 1000.0}
        return Checked(**{**base, **changes})  # type: ignore[arg-type]

    registering = backend(joined=100.0 - defects.SLOW_REGISTRATION_SECONDS + 1)
    registered = backend(joined=100.0 - defects.SLOW_REGISTRATION_SECONDS)
    assert not apply(At.PASSING, True, {"slow-registration"}, registering)
    assert apply(At.PASSING, True, {"slow-registration"}, registered)
    failed_now = backend(changed_at=1000.0 - defects.SLOW_UNHEALTHY_SECONDS + 1)
    assert apply(At.LINGER, False, {"slow-unhealthy"}, failed_now)
    assert not apply(At.LINGER, False, {"slow-unhealthy"}, backend(changed_at=1000.0 - 61, was_healthy=True))
    assert not apply(At.LINGER, False, {"slow-unhealthy"}, backend(changed_at=1000.0, was_healthy=False))
    assert not apply(At.LINGER, False, {"slow-unhealthy"}, backend(changed_at=None))


def test_serial_provisioning_lets_one_new_service_of_a_run_through_a_second(
        monkeypatch: pytest.MonkeyPatch) -> None:
    now = [1000.0]
    monkeypatch.setattr(time, "monotonic", lambda: now[0])
    pace = Pace()

    def provisions(run: str) -> bool:
        return apply(At.PACE, True, {"serial-provisioning"}, lambda: pace.turn(run))

    turns = [provisions(run) for run in ("r1", "r1", "r2")]
    assert turns == [True, False, True]
    now[0] += defects.SERIAL_PROVISIONING_SECONDS
    assert pace.turn("r1")
    assert apply(At.PACE, True, frozenset(), lambda: pytest.fail("no turn taken without the defect"))


def test_pool_defects() -> None:
    old = Backend("10.0.0.1", "10.0.0.1", (), None)
    new = Backend("10.0.0.2", "10.0.0.2", (), HealthTarget("http", "10.0.0.2", 10256))
    assert apply(At.POOL, {"b": new}, {"stale-pool"}, PoolHistory("pod", {"a": old})) == {"a": old, "b": new}
    assert apply(At.POOL, {"b": new}, {"stale-pool"}, PoolHistory("node", {"a": old})) == {"b": new}
    first = HealthTarget("http", "10.0.0.2", 31000)
    checked = apply(At.CHECK_TARGETS, {"b": new}, {"stale-health-check"}, {"b": first})
    assert checked["b"].health == first
    assert apply(At.POD_ADDRESS, "100.64.1.5", {"node-ips-in-pod-pool"}, "198.19.0.11") == "198.19.0.11"
    assert apply(At.POD_ADDRESS, "100.64.1.5", {"node-ips-in-pod-pool"}, None) == "100.64.1.5"


def test_address_status_and_restart_defects() -> None:
    assert apply(At.REQUEST, "198.18.0.250", {"ignore-requested-ip"}) is None
    assert not apply(At.KEEP_ADDRESS, True, {"move-ip-on-update"})
    assert not apply(At.FINALIZER, True, {"drop-finalizer"})
    assert not apply(At.TYPE_CHANGE, True, {"keep-finalizer-on-type-change"})
    assert apply(At.KEEP_DELETED, False, {"keep-deleted-vip"})
    assert not apply(At.REPROVISION, True, {"no-reprovision"})
    assert not apply(At.WARM, True, {"cold-restart"})
    assert not apply(At.KEEP_FLOWS, True, {"rehash-on-restart"})
    assert [apply(At.IP_MODE, params.ip_mode(m), {"wrong-ip-mode"}, m) for m in params.MODES] == [
        "VIP", "VIP", "Proxy"]
    svc = {"metadata": {}, "spec": {"ports": [{"port": 8080}]}}
    assert apply(At.SPEC, svc, {"ignore-updates"}, [{"port": 80}])["spec"]["ports"] == [{"port": 80}]
    assert svc["spec"]["ports"] == [{"port": 8080}]

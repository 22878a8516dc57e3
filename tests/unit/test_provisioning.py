"""Many Services' provisioning, watched in one list per look: times, misses, late and shared addresses."""

from __future__ import annotations

import pytest

from lbconform.provisioning import INTERVAL, Provisioned, ingress_address, watch_addresses


def service(name: str, address: str | None = None, hostname: bool = False) -> dict[str, object]:
    ingress = [{"hostname" if hostname else "ip": address}] if address else []
    return {"metadata": {"name": name}, "status": {"loadBalancer": {"ingress": ingress}}}


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


def test_ingress_address_is_ip_or_hostname() -> None:
    assert ingress_address(service("a", "198.18.0.10")) == "198.18.0.10"
    assert ingress_address(service("a", "lb.example.com", hostname=True)) == "lb.example.com"
    assert ingress_address(service("a")) is None
    assert ingress_address({"metadata": {"name": "a"}}) is None


def test_each_address_is_timed_from_its_own_creation_at_the_look_that_saw_it() -> None:
    clock = FakeClock()
    # Addresses appear: a at once, b on the third look; c is not one of ours.
    looks = [[service("a", "10.0.0.1"), service("b"), service("c", "10.0.0.9")],
             [service("a", "10.0.0.1"), service("b")],
             [service("a", "10.0.0.1"), service("b", "10.0.0.2")]]

    def list_services() -> list[dict[str, object]]:
        return looks.pop(0)  # type: ignore[return-value]

    got = watch_addresses(list_services, {"a": 99.0, "b": 100.0}, until=110.0, clock=clock, sleep=clock.sleep)
    assert got.addresses == {"a": "10.0.0.1", "b": "10.0.0.2"}
    assert got.times() == {"a": 1.0, "b": pytest.approx(2 * INTERVAL)}
    assert got.missing() == [] and got.shared() == {} and got.late(1.0) == {}
    assert got.late(0.5) == {"a": 1.0}
    assert looks == []


def test_the_watch_ends_at_its_deadline_with_what_is_missing() -> None:
    clock = FakeClock()
    got = watch_addresses(lambda: [service("a")], {"a": 100.0, "b": 100.0}, until=101.0, clock=clock,
                          sleep=clock.sleep)
    assert got.missing() == ["a", "b"] and got.summary() == {}
    assert clock.now == 101.0


def test_shared_addresses_and_the_summary() -> None:
    got = Provisioned({f"s{i}": 0.0 for i in range(20)})
    for i in range(20):
        got.addresses[f"s{i}"], got.seen[f"s{i}"] = ("10.0.0.1" if i in (3, 7) else f"10.0.1.{i}"), i + 1.0
    assert got.shared() == {"10.0.0.1": ["s3", "s7"]}
    assert got.summary() == {"p50": 10.0, "p95": 19.0, "max": 20.0}

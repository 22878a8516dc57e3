"""Many Services' provisioning, watched in one list per look from before the first creation: times,
misses, late and shared addresses."""

from __future__ import annotations

import time

import pytest

from lbconform.provisioning import INTERVAL, AddressWatch, Provisioned, ingress_address


def service(name: str, address: str | None = None, hostname: bool = False) -> dict[str, object]:
    ingress = [{"hostname" if hostname else "ip": address}] if address else []
    return {"metadata": {"name": name}, "status": {"loadBalancer": {"ingress": ingress}}}


def test_ingress_address_is_ip_or_hostname() -> None:
    assert ingress_address(service("a", "198.18.0.10")) == "198.18.0.10"
    assert ingress_address(service("a", "lb.example.com", hostname=True)) == "lb.example.com"
    assert ingress_address(service("a")) is None
    assert ingress_address({"metadata": {"name": "a"}}) is None


def test_an_address_given_while_later_services_are_created_is_seen_when_given() -> None:
    # a gets its address at once; b's creation takes a second (a loaded apiserver); c is not ours.
    given = {"a": "10.0.0.1"}

    def list_services() -> list[dict[str, object]]:
        return [service(n, given.get(n)) for n in ("a", "b")] + [service("c", "10.0.0.9")]

    with AddressWatch(list_services, ["a", "b"]) as watch:
        watch.created("a")
        time.sleep(1.0)
        watch.created("b")
        given["b"] = "10.0.0.2"
        got = watch.result(within=5.0)
    assert got.addresses == {"a": "10.0.0.1", "b": "10.0.0.2"}
    times = got.times()
    # Seen at the first look after each address was given, not after the last creation.
    assert times["a"] < INTERVAL + 0.2 and times["b"] < INTERVAL + 0.2, times
    assert got.missing() == [] and got.shared() == {} and got.late(0.5) == {}


def test_the_watch_ends_at_its_deadline_after_the_last_creation_with_what_is_missing() -> None:
    with AddressWatch(lambda: [service("a")], ["a", "b"]) as watch:
        watch.created("a")
        watch.created("b")
        started = time.monotonic()
        got = watch.result(within=0.5)
    assert 0.5 - INTERVAL <= time.monotonic() - started < 0.5 + 2 * INTERVAL
    assert got.missing() == ["a", "b"] and got.summary() == {}


def test_a_look_that_fails_is_raised_by_the_result() -> None:
    def list_services() -> list[dict[str, object]]:
        raise ConnectionError("the apiserver does not answer")

    with AddressWatch(list_services, ["a"]) as watch:
        watch.created("a")
        with pytest.raises(ConnectionError, match="does not answer"):
            watch.result(within=5.0)


def test_shared_addresses_and_the_summary() -> None:
    got = Provisioned({f"s{i}": 0.0 for i in range(20)})
    for i in range(20):
        got.addresses[f"s{i}"], got.seen[f"s{i}"] = ("10.0.0.1" if i in (3, 7) else f"10.0.1.{i}"), i + 1.0
    assert got.shared() == {"10.0.0.1": ["s3", "s7"]}
    assert got.summary() == {"p50": 10.0, "p95": 19.0, "max": 20.0}
    # An address seen before its creation's answer came back counts as at once.
    early = Provisioned({"a": 5.0}, {"a": "10.0.0.1"}, {"a": 4.9})
    assert early.times() == {"a": 0.0}

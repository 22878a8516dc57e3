from __future__ import annotations

import pytest

from lbconform.config import Timeouts, parse_duration


@pytest.mark.parametrize(("text", "seconds"), [("250ms", 0.25), ("30s", 30), ("5m", 300), ("1h", 3600),
                                               ("12", 12), (" 1.5m ", 90)])
def test_durations(text: str, seconds: float) -> None:
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("bad", ["", "5 minutes", "-1s", "1d"])
def test_bad_durations(bad: str) -> None:
    with pytest.raises(ValueError, match="not a duration"):
        parse_duration(bad)


def test_overrides_by_name() -> None:
    t = Timeouts().with_overrides(["lb_create=30m", "endpoint-lag=5s"])
    assert t.lb_create == 1800 and t.endpoint_lag == 5 and t.request == Timeouts().request


def test_unknown_timeout_names_the_known_ones() -> None:
    with pytest.raises(ValueError, match="lb_create, lb_propagation"):
        Timeouts().with_overrides(["lb_crate=1m"])


def test_every_timeout_is_documented_with_a_limit_above_its_default() -> None:
    for name, default, maximum, doc in Timeouts().describe():
        assert doc and default <= maximum, name

"""lbconform's pytest plugin (entry point ``pytest11``): features, profiles and providers.

Every test under a ``suites/`` folder declares the features it needs with
``@pytest.mark.features(Feature.X, ...)``; one without is a usage error, because a report
could not say what its result means. Tests of features outside the selected profiles are
deselected; tests of features the provider does not support (or the user exempted) are
reported as *not supported*, which a report keeps apart from *skipped*.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from lbconform.features import PROFILES, Feature, parse_features, profile_of

NOT_SUPPORTED = "not supported"
RESULT_PROPERTY = "lbconform.result"
FEATURES_PROPERTY = "lbconform.features"
SUITES_DIR = "suites"


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("lbconform")
    group.addoption("--provider", default="lab", help="the LB implementation's provider (default: lab)")
    group.addoption("--profile", action="append", default=[], choices=sorted(PROFILES),
                    help="profile to run (repeatable; default: core)")
    group.addoption("--features", action="append", default=[], metavar="FEATURE",
                    help="claim a feature the provider does not declare (repeatable)")
    group.addoption("--exempt-features", action="append", default=[], metavar="FEATURE",
                    help="do not claim this feature: its tests report not supported (repeatable)")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "features(*names): the lbconform features a suite test needs")
    config.addinivalue_line("markers", "lab: needs root and the lab; boots one or reuses a running one")
    config.addinivalue_line(
        "markers", "lab_lifecycle: boots and removes labs itself; runs without a shared lab")


def _in_suites(item: pytest.Item) -> bool:
    return SUITES_DIR in Path(str(item.fspath)).parts


def supported_features(config: pytest.Config) -> set[Feature]:
    """The provider's features, plus the user's claims, minus the user's exemptions."""
    from lbconform import providers

    try:
        added = parse_features(config.getoption("--features"))
        exempt = parse_features(config.getoption("--exempt-features"))
    except ValueError as exc:
        raise pytest.UsageError(str(exc)) from None
    try:
        provider = providers.load(config.getoption("--provider"))
    except Exception as exc:
        raise pytest.UsageError(str(exc)) from None
    return (provider.features() | added) - exempt


def item_features(item: pytest.Item) -> set[Feature]:
    names: list[str] = []
    for mark in item.iter_markers("features"):
        names += [str(a) for a in mark.args]
    try:
        return parse_features(names)
    except ValueError as exc:
        raise pytest.UsageError(f"{item.nodeid}: {exc}") from None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    suite_items = [i for i in items if _in_suites(i)]
    if not suite_items:
        return
    profiles = set(config.getoption("--profile") or ["core"])
    supported = supported_features(config)
    keep: list[pytest.Item] = []
    deselected: list[pytest.Item] = []
    for item in items:
        if not _in_suites(item):
            keep.append(item)
            continue
        feats = item_features(item)
        if not feats:
            raise pytest.UsageError(
                f"{item.nodeid} declares no features: add @pytest.mark.features(Feature....)")
        if not {profile_of(f) for f in feats} & profiles:
            deselected.append(item)
            continue
        item.user_properties.append((FEATURES_PROPERTY, ",".join(sorted(f.value for f in feats))))
        missing = sorted(f.value for f in feats - supported)
        if missing:
            item.user_properties.append((RESULT_PROPERTY, NOT_SUPPORTED))
            item.add_marker(pytest.mark.skip(reason=f"{NOT_SUPPORTED}: {', '.join(missing)}"))
        keep.append(item)
    if deselected:
        config.hook.pytest_deselected(items=deselected)
        items[:] = keep

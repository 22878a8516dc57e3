"""Fixtures for the hermetic lab: one lab per session, a fresh namespace per test.

``lab`` boots a lab the first time a test asks for it (or reuses one the user has running,
which it then leaves running); ``no_lab`` gives a test the machine without a lab, for the
lifecycle tests that boot their own. ``test_namespace`` gives each test a namespace labelled
with the run id; what the test made in it is deleted and waited for after the test, whatever
its outcome, and the namespaces themselves at the end of the session (see
``lbconform.kube.namespaces``).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from lbconform.kube.manifests import Applier
from lbconform.kube.namespaces import TestNamespaces
from lbconform.kube.rawapi import RawApi
from lbconform_lab.cluster import Lab

#: Test namespaces and what they hold are gone within this.
NAMESPACE_TIMEOUT_SECONDS = 120.0


class LabSession:
    """Whether this session booted the lab, and so whether it must take it down."""

    def __init__(self) -> None:
        self.lab = Lab()
        # A lab a killed run left behind is no one's: it is removed, and this session boots its own.
        self.lab.replace_leftover()
        self.user_lab = self.lab.dir.exists()
        self.booted = False

    def ensure_up(self) -> Lab:
        if not self.lab.dir.exists():
            self.lab.up()
            self.booted = True
        return self.lab

    def ensure_down(self) -> None:
        if self.user_lab:
            pytest.skip("a lab started outside this test session is running; "
                        "lifecycle tests need the machine without one")
        if self.lab.dir.exists():
            self.lab.down()

    def close(self) -> None:
        if self.booted and not self.user_lab:
            self.lab.down()


@pytest.fixture(scope="session")
def lab_session() -> Iterator[LabSession]:
    session = LabSession()
    yield session
    session.close()


@pytest.fixture(scope="session")
def run_id() -> str:
    return uuid.uuid4().hex[:8]


@pytest.fixture
def lab(lab_session: LabSession) -> Lab:
    return lab_session.ensure_up()


@pytest.fixture
def no_lab(lab_session: LabSession) -> Iterator[Lab]:
    lab_session.ensure_down()
    yield lab_session.lab
    lab_session.lab.down()


@pytest.fixture
def kube(lab: Lab) -> RawApi:
    return lab.api()


@pytest.fixture(scope="session")
def lab_namespaces(lab_session: LabSession, run_id: str) -> Iterator[TestNamespaces]:
    """The lab tests' namespaces; waits for all of them to be gone at the end (before the lab goes)."""
    namespaces = TestNamespaces(lab_session.ensure_up().api(), run_id, NAMESPACE_TIMEOUT_SECONDS)
    yield namespaces
    namespaces.wait_gone()


@pytest.fixture
def test_namespace(lab: Lab, lab_namespaces: TestNamespaces) -> Iterator[Applier]:
    """An Applier bound to a fresh namespace of this test; everything in it is removed after."""
    applier = lab_namespaces.create()
    try:
        yield applier
    finally:
        lab_namespaces.release(applier)

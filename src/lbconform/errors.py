"""The harness's user-facing errors.

Every error a user can cause or meet carries one line that says what went wrong and what to
do; the CLI prints that line and exits non-zero, never a traceback.
"""

from __future__ import annotations


class LbconformError(Exception):
    """An error with a one-line message meant for the user."""


class UsageError(LbconformError):
    """The user asked for something that cannot be done as asked."""


class BuildError(LbconformError):
    """Building the lab's binaries failed."""


class LabError(LbconformError):
    """The lab could not be brought up, used or torn down."""


class LoadError(LbconformError):
    """A Locust run could not be started, did not finish, or ended badly."""

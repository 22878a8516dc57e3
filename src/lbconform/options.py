"""The options of a run, defined once: ``lbconform run`` and the pytest plugin both add them from
this table, and ``lbconform run`` hands the user's values to the suites' pytest through it.

An option is spelled the same in both places except where pytest already has the name (pytest's
``--timeout`` belongs to pytest-timeout, so the plugin says ``--lbconform-timeout``) or where the
plugin's name says more among pytest's options (``--implementation-*`` for the report's fields).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from lbconform.features import PROFILES


@dataclass(frozen=True)
class Option:
    flag: str
    help: str
    repeat: bool = False
    switch: bool = False
    metavar: str | None = None
    #: The plugin's name where it is not ``flag``.
    pytest_flag: str | None = None

    @property
    def dest(self) -> str:
        """The attribute that holds the value (``--provider-option`` -> ``provider_option``)."""
        return self.flag.lstrip("-").replace("-", "_")

    @property
    def in_pytest(self) -> str:
        return self.pytest_flag or self.flag

    def argparse_kwargs(self) -> dict[str, Any]:
        kwargs: dict[str, Any] = {"help": self.help}
        if self.switch:
            kwargs.update(action="store_true", default=False)
        elif self.repeat:
            kwargs.update(action="append", default=[])
        else:
            kwargs["default"] = None
        if self.metavar:
            kwargs["metavar"] = self.metavar
        return kwargs


#: Every option that reaches the suites, in the order ``--help`` lists them.
RUN_OPTIONS: tuple[Option, ...] = (
    Option("--kubeconfig", "target this cluster (default: the local cluster, the lab where lbconform-lab "
                           "is installed)"),
    Option("--context", "the kubeconfig context"),
    Option("--provider", "the LB implementation's provider (default: the local cluster's own; with "
                         "--kubeconfig, name one: generic, kind, metallb, ...)"),
    Option("--mode", "the implementation's mode, as the provider names them (lab: node, nodeport, pod)"),
    Option("--provider-option", "an option of the provider (repeatable; docs/providers.md lists them)",
           repeat=True, metavar="NAME=VALUE"),
    Option("--declaration", "what the implementation claims, as a file (YAML or JSON): its features and "
                            "values override the provider's (docs/writing-a-declaration.md)", metavar="FILE"),
    Option("--profile", f"{', '.join(PROFILES)} (repeatable; default: core)", repeat=True, metavar="PROFILE"),
    Option("--features", "claim a feature the provider does not declare (repeatable)", repeat=True,
           metavar="FEATURE"),
    Option("--exempt-features", "do not claim a feature: its tests report not supported (repeatable)",
           repeat=True, metavar="FEATURE"),
    Option("--timeout", "override a named timeout, e.g. lb_create=10m (repeatable)", repeat=True,
           metavar="NAME=DURATION", pytest_flag="--lbconform-timeout"),
    Option("--allow-disruptive", "let the chaos profile kill, drain and restart the nodes its experiments "
                                 "name", switch=True),
    Option("--client-address", "the client's address as backends see it, behind a NAT"),
    Option("--client-netns", "send the traffic from this network namespace of this machine (default: the "
                             "local cluster's client namespace, else this one)", metavar="NAME"),
    Option("--run-id", "label everything the run makes with this id (default: a random one); lowercase "
                       "letters and digits, at most 16"),
    Option("--organization", "report: who makes the implementation",
           pytest_flag="--implementation-organization"),
    Option("--project", "report: the implementation's name", pytest_flag="--implementation-project"),
    Option("--url", "report: where the implementation lives", pytest_flag="--implementation-url"),
    Option("--implementation-version", "report: the version under test"),
    Option("--contact", "report: who to ask (repeatable)", repeat=True,
           pytest_flag="--implementation-contact"),
)

BY_DEST: Mapping[str, Option] = {o.dest: o for o in RUN_OPTIONS}


def add_all(add: Callable[..., Any], *, pytest: bool) -> None:
    """Add every run option through ``add`` (argparse's ``add_argument`` or pytest's
    ``addoption``), by the name that side uses."""
    for option in RUN_OPTIONS:
        if pytest:
            add(option.in_pytest, **option.argparse_kwargs())
        else:
            add(option.flag, dest=option.dest, **option.argparse_kwargs())


def get(getoption: Callable[[str], Any], dest: str) -> Any:
    """One option's value inside pytest (``config.getoption``), by its ``dest``."""
    return getoption(BY_DEST[dest].in_pytest)


def pytest_args(values: Mapping[str, Any]) -> list[str]:
    """The suites' pytest arguments that carry ``values`` (by ``dest``); unset ones are left out."""
    argv: list[str] = []
    for option in RUN_OPTIONS:
        value = values.get(option.dest)
        if option.switch:
            argv += [option.in_pytest] if value else []
        elif option.repeat:
            for item in value or ():
                argv += [option.in_pytest, str(item)]
        elif value:
            argv += [option.in_pytest, str(value)]
    return argv

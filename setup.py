"""Build hook: the wheel carries the product's data folders under ``lbconform/_data`` (suites/,
fixtures/, manifests/, locustfiles/, experiments/, reports/schema/ and the root conftest.py
that loads the fixtures), so that ``pip install lbconform`` alone runs everything. A checkout
(and an editable install) uses the top-level folders in place; see lbconform/resources.py.
Everything else is declared in pyproject.toml."""

import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

ROOT = Path(__file__).resolve().parent
DATA = ("suites", "fixtures", "manifests", "locustfiles", "experiments", "reports/schema", "conftest.py")


class BuildWithData(build_py):
    def run(self) -> None:
        super().run()
        target = Path(self.build_lib) / "lbconform" / "_data"
        for name in DATA:
            source, copy = ROOT / name, target / name
            if source.is_dir():
                shutil.copytree(source, copy, dirs_exist_ok=True,
                                ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
            elif source.is_file():
                copy.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(source, copy)


setup(cmdclass={"build_py": BuildWithData})

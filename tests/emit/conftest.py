"""Fixtures for the emitter tests and the golden-file switch (pytest --update-golden when
pointed at tests/emit, or AUTOPAR_UPDATE_GOLDEN=1 from anywhere)."""

from __future__ import annotations

import os

import pytest

from emit_cases import GOLDEN_CASES, make_job


def pytest_addoption(parser):
    # Registered when pytest is pointed at tests/emit (options of nested conftests load late);
    # AUTOPAR_UPDATE_GOLDEN=1 works from anywhere.
    try:
        parser.addoption("--update-golden", action="store_true", default=False, help="rewrite tests/golden/emit")
    except ValueError:
        pass


@pytest.fixture
def update_golden(request) -> bool:
    return bool(request.config.getoption("--update-golden", default=False)) or os.environ.get("AUTOPAR_UPDATE_GOLDEN") == "1"


@pytest.fixture
def golden_job():
    def build(name: str):
        return make_job(*GOLDEN_CASES[name])
    return build

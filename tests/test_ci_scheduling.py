"""How CI's test processes share the work (`.ci/run`: `pytest -n 2 --dist loadfile`): whole files, except the
folders in `conftest.TOGETHER`, each one unit (the end-to-end files share the servers a session fixture starts)."""

from __future__ import annotations

from typing import Any

from tests.conftest import pytest_xdist_make_scheduler


class _Config:
    def __init__(self, dist: str) -> None:
        self.values = {"dist": dist, "tx": ["2*popen"]}

    def getvalue(self, name: str) -> Any:
        return self.values[name]


def test_the_end_to_end_files_are_one_unit_and_other_files_each_their_own() -> None:
    scheduler: Any = pytest_xdist_make_scheduler(_Config("loadfile"), None)  # type: ignore[arg-type]
    units = {
        scheduler._split_scope(nodeid)
        for nodeid in [
            "tests/e2e/test_faults.py::test_warn_mode_stale_lengths_are_logged_and_served",
            "tests/e2e/test_guard_off.py::test_greedy_outputs_identical_with_the_guard_off_warn_and_on",
            "tests/e2e/test_guarded_serving.py::test_serves_every_request[dp2]",
        ]
    }
    assert units == {"tests/e2e/"}
    assert scheduler._split_scope("tests/deploy/test_facts.py::test_x[0.28.0]") == "tests/deploy/test_facts.py"
    assert scheduler._split_scope("tests/test_cli.py::test_y") == "tests/test_cli.py"


def test_another_distribution_mode_is_left_to_xdist() -> None:
    assert pytest_xdist_make_scheduler(_Config("load"), None) is None  # type: ignore[arg-type]

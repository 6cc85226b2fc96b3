"""Fixtures of the blind security set, round 2; the harness itself is sg2harness.py."""

import pytest
from sg2harness import ensure_vllm


@pytest.fixture
def work(tmp_path):
    """The test's tmp folder, marked so runs started under it use `<tmp>/home` as HOME and XDG_CACHE_HOME."""
    (tmp_path / ".sg-test-root").write_text("")
    (tmp_path / "home" / ".cache").mkdir(parents=True)
    return tmp_path


@pytest.fixture(scope="session")
def vllm_src():
    """The real vLLM 0.33.0 `vllm/` package (its .py files), read-only: copy it before changing anything."""
    return ensure_vllm()

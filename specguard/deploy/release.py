"""`specguard config --vllm-version X.Y.Z`: the Python sources of a vLLM release, fetched once into the user cache.

pip downloads the release's wheel (`pip download --no-deps --only-binary=:all:`: no install, no build, nothing of
vLLM runs; pip's own configuration and PIP_* variables apply, so a mirror or a local wheel folder works), and only
its `vllm/**.py` members are extracted, each checked like any hostile input: no absolute or `..` paths, no links,
a size cap per file and in all. The folder is written beside its final place and renamed into it when complete.
"""

from __future__ import annotations

import os
import re
import shutil
import stat
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path, PurePosixPath

from specguard._files import SOURCE_CAP
from specguard._snapshots import user_cache_home
from specguard.errors import UserError

_VERSION = re.compile(r"\d+(\.\d+){1,3}((a|b|rc|\.post|\.dev)\d+)*")
# The wheel is only a container for the .py files: any platform's build has the same ones.
_PLATFORMS = ("manylinux_2_28_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64", "manylinux1_x86_64")
_TOTAL_CAP = 512 * 1024 * 1024


def sources_dir() -> Path:
    return user_cache_home() / "vllm-src"


def release_source(version: str) -> Path:
    """The `vllm/` dir of release `version`, downloaded and unpacked on first use."""
    if not _VERSION.fullmatch(version):
        raise UserError(f"--vllm-version {version!r}: expected a release number such as 0.33.0")
    target = sources_dir() / version
    if (target / ".complete").is_file() and (target / "vllm" / "__init__.py").is_file():
        return target / "vllm"
    sources_dir().mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=f".{version}-", dir=sources_dir()) as work:
        wheel = _download(version, Path(work) / "wheel")
        unpacked = Path(work) / "tree"
        _extract(wheel, unpacked)
        (unpacked / ".complete").touch()
        try:
            os.replace(unpacked, target)
        except OSError:
            if not (target / ".complete").is_file():  # another run got there first, or a half-written folder
                shutil.rmtree(target, ignore_errors=True)
                os.replace(unpacked, target)
    return target / "vllm"


def _download(version: str, into: Path) -> Path:
    command = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--quiet"]
    for platform in _PLATFORMS:
        command += ["--platform", platform]
    command += ["--implementation", "cp", "-d", str(into), f"vllm=={version}"]
    try:
        proc = subprocess.run(command, capture_output=True, text=True, timeout=3600, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise UserError(f"--vllm-version {version}: running pip failed: {exc}") from None
    wheels = sorted(into.glob(f"vllm-{version}-*.whl")) if into.is_dir() else []
    if proc.returncode != 0 or not wheels:
        raise UserError(f"--vllm-version {version}: {_why_not_downloaded(version, proc.stderr or proc.stdout)}")
    return wheels[0]


# pip's own line where it found no such version: the releases it could download, or "none"
_FROM_VERSIONS = re.compile(r"\(from versions: ([^)]*)\)")
_ERRNO = re.compile(r"(\[Errno -?\d+\][^'\")]*)")  # the OS's reason in pip's connection warning


def _why_not_downloaded(version: str, said: str) -> str:
    """What pip's refusal means for the user: a release the package index does not have (a typo, a version too new
    for it), an index pip could not reach (offline), or one that holds no vllm."""
    lines = [ln.strip() for ln in said.splitlines() if ln.strip()]
    last = lines[-1] if lines else "pip said nothing"
    listed = _FROM_VERSIONS.search(said)
    if listed is None:
        return f"pip could not download the vllm {version} wheel: {last}"
    versions = [v.strip() for v in listed.group(1).split(",") if v.strip() and v.strip() != "none"]
    if versions:
        return (
            f"vllm {version} is not a release pip can download as a wheel (the newest it has is {versions[-1]});"
            " pass a release it has, or --vllm-source DIR"
        )
    failed = [ln for ln in lines if "connection" in ln.lower() or "resolve" in ln.lower()]
    if failed:
        cause = _ERRNO.search(failed[-1])
        return (
            f"pip could not reach the package index (offline?): {cause.group(1) if cause else failed[-1]};"
            " check the network or pip's index settings, or pass --vllm-source DIR"
        )
    return (
        "the package index pip uses lists no vllm release at all; check pip's index settings, or pass --vllm-source DIR"
    )


def _extract(wheel: Path, into: Path) -> None:
    """Only `vllm/**.py`, as regular files, inside `into`, within the caps."""
    total = 0
    try:
        with zipfile.ZipFile(wheel) as archive:
            for info in archive.infolist():
                name = PurePosixPath(info.filename)
                if name.suffix != ".py" or not name.parts or name.parts[0] != "vllm" or info.is_dir():
                    continue
                if name.is_absolute() or ".." in name.parts or "\\" in info.filename:
                    raise UserError(f"{wheel.name}: refusing a member outside the package: {info.filename!r}")
                if stat.S_ISLNK(info.external_attr >> 16):
                    continue  # a link in a wheel is nothing specguard reads
                if info.file_size > SOURCE_CAP:
                    raise UserError(f"{wheel.name}: {info.filename} is too large ({info.file_size} bytes)")
                total += info.file_size
                if total > _TOTAL_CAP:
                    raise UserError(f"{wheel.name}: its Python sources exceed {_TOTAL_CAP} bytes")
                path = into.joinpath(*name.parts)
                path.parent.mkdir(parents=True, exist_ok=True)
                with archive.open(info) as src, path.open("wb") as dst:
                    written = 0
                    while chunk := src.read(1 << 20):  # the header may lie about the size: count what comes
                        written += len(chunk)
                        if written > SOURCE_CAP:
                            raise UserError(f"{wheel.name}: {info.filename} is too large")
                        dst.write(chunk)
    except zipfile.BadZipFile as exc:
        raise UserError(f"{wheel.name}: not a readable wheel ({exc})") from None
    if not (into / "vllm" / "__init__.py").is_file():
        raise UserError(f"{wheel.name}: holds no vllm/__init__.py")

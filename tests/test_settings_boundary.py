"""Settings and ignore files come from the project, not from whoever can write a folder above it (issue 26 item 3).

Settings discovery and the ignore files stop at the project's root: the first folder, walking up from the path
checked, that holds `.git` or a `pyproject.toml` (with or without [tool.specguard]). A [tool.specguard] planted
in a folder above it (a world-writable /tmp holding the checkout) is never read: the findings stay those of the
project alone and nothing is written in the planter's folder. A settings file inside the project that another user
owns, or that others may write, is not used either: one warning names it, why, and `--config` to use it anyway.
"""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from specguard import ownership
from tests.test_cache import tree

# What a planter puts in a pyproject.toml above the project: each would hide the finding or move the cache.
PLANTED = {
    "selects-nothing-useful": 'select = ["SG2"]',
    "ignores-everything": 'per-file-ignores = { "*" = ["ALL"] }',
    "excludes-everything": 'extend-exclude = ["*.py"]',
    "moves-the-cache": 'cache-dir = "stolen-cache"',
}


def _check(cwd: Path, xdg: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "specguard", "check", "fork", "--output-format", "json", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        env={**os.environ, "XDG_CACHE_HOME": str(xdg)},
        timeout=300,
    )


def _project(planter: Path, marker: str) -> Path:
    """The test tree in `planter/project`, rooted by `marker`: `.git`, or a pyproject.toml of its own without
    [tool.specguard]."""
    (planter / "project").mkdir(parents=True)
    project = tree(planter / "project", "DraftModelSpeculator")
    if marker == ".git":
        (project / ".git").mkdir()
    else:
        (project / "pyproject.toml").write_text('[project]\nname = "fork"\n')
    return project


def _listing(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*") if "project" not in p.parts)


@pytest.mark.parametrize("marker", [".git", "pyproject.toml"])
@pytest.mark.parametrize("planted", sorted(PLANTED))
def test_a_specguard_table_above_the_project_root_is_not_read(tmp_path: Path, marker: str, planted: str) -> None:
    planter, xdg = tmp_path / "tmp", tmp_path / "xdg"
    project = _project(planter, marker)
    expected = _check(project, xdg, "--no-cache")
    assert expected.returncode == 1 and '"SG101"' in expected.stdout
    (planter / "pyproject.toml").write_text(f"[tool.specguard]\n{PLANTED[planted]}\n")
    before = _listing(planter)
    for _ in range(2):  # cold, then warm: a cache written somewhere would be read the second time
        out = _check(project, xdg)
        assert (out.returncode, out.stdout, out.stderr) == (1, expected.stdout, "")
    assert _listing(planter) == before, "the run wrote in the planter's folder"
    assert (project / ".specguard_cache").is_dir()


@pytest.mark.parametrize("marker", [".git", "pyproject.toml"])
@pytest.mark.parametrize("planted", [".ignore", ".gitignore"])
def test_an_ignore_file_above_the_project_root_hides_nothing(tmp_path: Path, marker: str, planted: str) -> None:
    planter, xdg = tmp_path / "tmp", tmp_path / "xdg"
    project = _project(planter, marker)
    expected = _check(project, xdg, "--no-cache")
    assert expected.returncode == 1 and '"SG101"' in expected.stdout
    (planter / planted).write_text("*.py\nfork/\n")
    (planter / ".git").mkdir()  # so a .gitignore there would count, were it read
    out = _check(project, xdg, "--no-cache")
    assert (out.returncode, out.stdout, out.stderr) == (1, expected.stdout, "")


def test_ignore_files_up_to_the_project_root_still_count(tmp_path: Path) -> None:
    """The boundary is the project's root, not the folder checked: the root's own ignore files apply below it."""
    project = _project(tmp_path, ".git")
    (project / ".gitignore").write_text("leaf.py\n")
    proc = subprocess.run(
        [sys.executable, "-m", "specguard", "check", ".", "--no-cache", "--show-files"],
        cwd=project / "fork",
        capture_output=True,
        text=True,
        env={**os.environ, "XDG_CACHE_HOME": str(tmp_path / "xdg")},
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    assert [Path(p).name for p in proc.stdout.split()] == ["__init__.py", "base.py"]


def _untrusted(path: Path, how: str) -> str:
    """Make the project's pyproject.toml one that someone else may have written; returns the reason expected."""
    if how == "another-owner" and os.geteuid() == 0:
        os.chown(path, 65534, 65534)
        return "it belongs to user id 65534, not to you"
    if how == "group-writable" and os.geteuid() == 0:
        os.chown(path, 0, 65534)
        path.chmod(0o664)
        return "its group (id 65534) may write it (mode 0664)"
    # only root can give a file away; for anyone else these cases are the mode's
    path.chmod(0o666)
    return "anyone may write it (mode 0666)"


@pytest.mark.parametrize("how", ["another-owner", "group-writable", "writable-by-others"])
def test_a_settings_file_others_may_have_written_is_warned_about_and_not_used(tmp_path: Path, how: str) -> None:
    project, xdg = _project(tmp_path, ".git"), tmp_path / "xdg"
    expected = _check(project, xdg, "--no-cache")
    assert expected.returncode == 1 and '"SG101"' in expected.stdout
    pyproject = project / "pyproject.toml"
    pyproject.write_text('[tool.specguard]\nper-file-ignores = { "*" = ["ALL"] }\n')
    why = _untrusted(pyproject, how)
    out = _check(project, xdg, "--no-cache")
    assert (out.returncode, out.stdout) == (1, expected.stdout), "the untrusted settings hid the finding"
    assert out.stderr == (
        f"specguard: warning: {pyproject} was not read ({why}): someone else may have written its "
        f"[tool.specguard]; pass `--config {pyproject}` to use it anyway\n"
    )
    named = _check(project, xdg, "--no-cache", "--config", str(pyproject))  # the user's explicit choice
    assert (named.returncode, named.stdout.strip(), named.stderr) == (0, "[]", "")
    quiet = _check(project, xdg, "--no-cache", "--quiet")
    assert (quiet.returncode, quiet.stderr) == (1, "")


def test_the_users_own_settings_file_is_used_without_a_word(tmp_path: Path) -> None:
    project, xdg = _project(tmp_path, ".git"), tmp_path / "xdg"
    pyproject = project / "pyproject.toml"
    pyproject.write_text('[tool.specguard]\nper-file-ignores = { "*" = ["ALL"] }\n')
    pyproject.chmod(0o644)
    out = _check(project, xdg, "--no-cache")
    assert (out.returncode, out.stdout.strip(), out.stderr) == (0, "[]", "")


def _stat(mode: int, uid: int, gid: int) -> os.stat_result:
    return os.stat_result((stat.S_IFREG | mode, 1, 1, 1, uid, gid, 0, 0, 0, 0))


def test_group_write_is_trusted_only_for_the_owners_private_group(monkeypatch: pytest.MonkeyPatch) -> None:
    """Distributions with user private groups (umask 002) make every file group-writable by a group holding only
    its owner: that is no one else's write."""
    me = 1000
    monkeypatch.setattr(ownership.os, "geteuid", lambda: me)
    monkeypatch.setattr(ownership, "_user_name", lambda uid: {me: "me", 0: "root"}.get(uid))
    monkeypatch.setattr(ownership, "_primary_gid", lambda uid: {me: 4242, 0: 0}.get(uid))
    groups = {4242: ("me", []), 0: ("root", []), 100: ("users", ["me", "other"]), 4343: ("me", ["other"])}
    monkeypatch.setattr(ownership, "_group", lambda gid: groups.get(gid))
    assert ownership.untrusted(_stat(0o664, me, 4242)) is None
    assert ownership.untrusted(_stat(0o644, me, 100)) is None
    assert ownership.untrusted(_stat(0o664, 0, 0)) is None  # root's, as system files are
    assert ownership.untrusted(_stat(0o664, me, 100)) == "its group (id 100) may write it (mode 0664)"
    assert ownership.untrusted(_stat(0o664, me, 4343)) == "its group (id 4343) may write it (mode 0664)"
    assert ownership.untrusted(_stat(0o646, me, 4242)) == "anyone may write it (mode 0646)"
    assert ownership.untrusted(_stat(0o644, me + 1, 4242)) == f"it belongs to user id {me + 1}, not to you"


# -- every settings-like file found in the tree passes the same trust check ---------------------------------------

BLINDING_PACK = (
    '[speculators]\nreplace = true\nbases = ["NoSuchBase"]\n'
    '[metadata]\nreplace = true\nsink = ["no_such_sink"]\n'
    '[kv_groups]\nreplace = true\nflags = ["no_such_flag"]\n'
)


@pytest.mark.parametrize("how", ["another-owner", "writable-by-others"])
@pytest.mark.parametrize("name", [".ignore", ".gitignore", ".git/info/exclude"])
def test_an_ignore_file_others_may_have_written_is_warned_about_and_not_used(
    tmp_path: Path, name: str, how: str
) -> None:
    project, xdg = _project(tmp_path, ".git"), tmp_path / "xdg"
    expected = _check(project, xdg, "--no-cache")
    assert expected.returncode == 1 and '"SG101"' in expected.stdout
    ignore = project / name
    ignore.parent.mkdir(parents=True, exist_ok=True)
    ignore.write_text("*.py\nfork/\n")
    why = _untrusted(ignore, how)
    out = _check(project, xdg, "--no-cache")
    assert (out.returncode, out.stdout) == (1, expected.stdout), "the untrusted ignore file hid the finding"
    assert out.stderr == (
        f"specguard: warning: {ignore} was not read ({why}): someone else may have written what it excludes from "
        "the check\n"
    )
    ignore.chmod(0o644)
    if os.geteuid() == 0:
        os.chown(ignore, 0, 0)
    hidden = _check(project, xdg, "--no-cache")  # the user's own ignore file counts, without a word of trust
    assert (hidden.returncode, hidden.stdout.strip()) == (0, "[]")
    assert hidden.stderr == "specguard: warning: no Python files found under the given paths\n"  # as ruff says


@pytest.mark.parametrize("how", ["another-owner", "writable-by-others"])
def test_a_rule_pack_the_settings_name_that_others_may_have_written_is_warned_about_and_not_used(
    tmp_path: Path, how: str
) -> None:
    project, xdg = _project(tmp_path, ".git"), tmp_path / "xdg"
    (project / "pyproject.toml").write_text('[tool.specguard]\nrule-packs = ["packs/fork.toml"]\n')
    pack = project / "packs" / "fork.toml"
    pack.parent.mkdir()
    pack.write_text(BLINDING_PACK)
    blind = _check(project, xdg, "--no-cache")
    assert (blind.returncode, blind.stdout.strip()) == (0, "[]"), "the user's own pack applies"
    why = _untrusted(pack, how)
    out = _check(project, xdg, "--no-cache")
    assert out.returncode == 1 and '"SG101"' in out.stdout, "the untrusted pack blinded the run"
    assert out.stderr == (
        f"specguard: warning: rule pack {pack}, named in {project / 'pyproject.toml'}, was not read ({why}): "
        f"someone else may have written it; pass `--rule-pack {pack}` to use it anyway\n"
    )
    named = _check(project, xdg, "--no-cache", "--rule-pack", str(pack))  # the user's explicit choice
    assert (named.returncode, named.stdout.strip()) == (0, "[]")


@pytest.mark.skipif(os.geteuid() != 0, reason="only root can make a symlink another user owns")
def test_a_rule_pack_reached_through_another_users_symlink_is_not_used(tmp_path: Path) -> None:
    project, xdg = _project(tmp_path, ".git"), tmp_path / "xdg"
    (project / "pyproject.toml").write_text('[tool.specguard]\nrule-packs = ["packs/fork.toml"]\n')
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    (theirs / "fork.toml").write_text(BLINDING_PACK)  # a file of ours: only the link is theirs
    (project / "packs").symlink_to(theirs)
    os.lchown(project / "packs", 65534, 65534)
    out = _check(project, xdg, "--no-cache")
    assert out.returncode == 1 and '"SG101"' in out.stdout, "the pack behind their link blinded the run"
    assert f"{project / 'packs'} on the way to it is a symlink that user id 65534 made" in out.stderr


# -- a settings file that is not UTF-8 is refused, never read as holding no settings ------------------------------


@pytest.mark.parametrize(
    ("encoding", "says"), [("utf-16", "is UTF-16 text"), ("utf-32", "is UTF-32 text"), ("latin-1", "not UTF-8")]
)
def test_a_pyproject_that_is_not_utf8_is_one_line_and_exit_2(tmp_path: Path, encoding: str, says: str) -> None:
    project, xdg = _project(tmp_path, ".git"), tmp_path / "xdg"
    pyproject = project / "pyproject.toml"
    pyproject.write_bytes('[tool.specguard]\nextend-exclude = ["é/*"]\n'.encode(encoding))
    out = _check(project, xdg, "--no-cache")
    assert (out.returncode, out.stdout) == (2, "")
    (line,) = out.stderr.splitlines()
    assert line.startswith(f"specguard: error: {pyproject}: configuration ") and says in line, line


def test_a_settings_file_with_a_utf8_byte_order_mark_is_read_as_utf8(tmp_path: Path) -> None:
    project, xdg = _project(tmp_path, ".git"), tmp_path / "xdg"
    (project / "pyproject.toml").write_bytes(
        b"\xef\xbb\xbf" + b'[tool.specguard]\nper-file-ignores = { "*" = ["ALL"] }\n'
    )
    out = _check(project, xdg, "--no-cache")
    assert (out.returncode, out.stdout.strip(), out.stderr) == (0, "[]", "")

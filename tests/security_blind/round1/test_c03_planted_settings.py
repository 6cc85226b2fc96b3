"""CLASS 3: settings taken from outside the project (a `[tool.specguard]` planted in an ancestor folder, e.g. a
world-writable /tmp/xyz holding the project), or planted inside it by another user, must not hide findings
nor move where specguard writes."""

import os
from pathlib import Path

from sg1harness import (
    NOBODY,
    SG101_BAD,
    SG103_BAD,
    assert_sane,
    check_json,
    write,
)

MARK = "pwned-cache"


def _project(base: Path, own: str = "git") -> Path:
    """A project with its own root marker: a .git folder ("git") or a pyproject.toml without [tool.specguard]."""
    proj = base / "proj"
    if own == "git":
        write(proj / ".git" / "HEAD", "ref: refs/heads/main\n")
    else:
        write(
            proj / "pyproject.toml", '[project]\nname = "victim"\nversion = "1.0"\n\n[tool.ruff]\nline-length = 100\n'
        )
    write(proj / "pkg" / "__init__.py", "")
    write(proj / "pkg" / "a.py", SG101_BAD)
    write(proj / "pkg" / "b.py", SG103_BAD)
    return proj


def _planted_parent(tmp_path: Path) -> Path:
    xyz = tmp_path / "xyz"
    xyz.mkdir()
    os.chown(xyz, NOBODY, NOBODY)
    os.chmod(xyz, 0o1777)
    return xyz


def _plant(path: Path, text: str, mode=0o644):
    write(path, text)
    os.chown(path, NOBODY, NOBODY)
    os.chmod(path, mode)


def _reference(tmp_path, own="git"):
    clean = _project(tmp_path / "clean-base", own)
    res, ref = check_json(["check", "pkg", "-n"], clean, tmp_path / "clean-home", clean)
    assert res.rc == 1 and ref, f"cannot set up: the clean project gave no findings\n{res.describe()}"
    return ref


def _assert_unchanged(res, found, ref, planted: Path | None = None):
    assert_sane(res, rcs=(1, 2))
    if res.rc == 2:
        errs = [ln for ln in res.err.splitlines() if "error" in ln]
        assert len(errs) == 1 and (planted is None or planted.name in errs[0]), (
            f"refused, but not with one error line naming the planted file\n{res.describe()}"
        )
        return
    assert found == ref, f"planted settings changed the findings:\nclean   {ref}\nplanted {found}\n{res.describe()}"


def test_ancestor_pyproject_per_file_ignores_project_has_git(tmp_path, home):
    """CLASS 3: /tmp/xyz (world-writable, owned by another user) holds pyproject.toml with [tool.specguard] per-file-ignores = {"*" = ["SG1", "SG2"]}; the project below has its own .git. EXPECT: the same findings as the project without the planted file (exit 1)."""
    xyz = _planted_parent(tmp_path)
    proj = _project(xyz, "git")
    planted = xyz / "pyproject.toml"
    _plant(planted, '[tool.specguard]\nper-file-ignores = { "*" = ["SG1", "SG2"] }\n')
    res, found = check_json(["check", "pkg", "-n"], proj, home, proj)
    _assert_unchanged(res, found, _reference(tmp_path, "git"))


def test_ancestor_pyproject_select_project_pyproject_without_table(tmp_path, home):
    """CLASS 3: the ancestor's planted pyproject.toml says select = ["SG202"]; the project has its own pyproject.toml WITHOUT [tool.specguard] (ruff-style lookup would walk past it). EXPECT: the same findings as without the planted file."""
    xyz = _planted_parent(tmp_path)
    proj = _project(xyz, "pyproject")
    planted = xyz / "pyproject.toml"
    _plant(planted, '[tool.specguard]\nselect = ["SG202"]\n')
    res, found = check_json(["check", "pkg", "-n"], proj, home, proj)
    _assert_unchanged(res, found, _reference(tmp_path, "pyproject"))


def test_ancestor_pyproject_exclude_everything(tmp_path, home):
    """CLASS 3: the ancestor's planted pyproject.toml sets exclude = ["*.py"] and extend-exclude = ["pkg"]; the project has its own .git. EXPECT: the same findings as without the planted file."""
    xyz = _planted_parent(tmp_path)
    proj = _project(xyz, "git")
    planted = xyz / "pyproject.toml"
    _plant(planted, '[tool.specguard]\nexclude = ["*.py"]\nextend-exclude = ["pkg", "proj"]\nforce-exclude = true\n')
    res, found = check_json(["check", "pkg", "-n"], proj, home, proj)
    _assert_unchanged(res, found, _reference(tmp_path, "git"))


def test_ancestor_pyproject_ignore_all_codes_deep_ancestor(tmp_path, home):
    """CLASS 3: the planted pyproject.toml (ignore = ["SG"]) sits two folders above a project that has its own .git, and the project is checked from one of its subfolders. EXPECT: the same findings as without the planted file."""
    xyz = _planted_parent(tmp_path)
    mid = xyz / "shared" / "users"
    mid.mkdir(parents=True)
    proj = _project(mid, "git")
    planted = xyz / "pyproject.toml"
    _plant(planted, '[tool.specguard]\nselect = ["SG2"]\nignore = ["SG1"]\n')
    res, found = check_json(["check", "."], proj / "pkg", home, proj)
    ref = [(c, p, r, col) for c, p, r, col in _reference(tmp_path, "git")]
    _assert_unchanged(res, found, ref)


def test_ancestor_pyproject_moves_cache_dir(tmp_path, home):
    """CLASS 3: the ancestor's planted pyproject.toml sets cache-dir = "pwned-cache" (inside its own folder, which holds the project); the project has its own .git. EXPECT: nothing is created under xyz/pwned-cache, and the findings are unchanged."""
    xyz = _planted_parent(tmp_path)
    proj = _project(xyz, "git")
    planted = xyz / "pyproject.toml"
    _plant(planted, f'[tool.specguard]\ncache-dir = "{MARK}"\n')
    res, found = check_json(["check", "pkg"], proj, home, proj)
    assert not (xyz / MARK).exists(), (
        f"specguard wrote its cache where the planted settings said: {sorted(map(str, (xyz / MARK).rglob('*')))}\n{res.describe()}"
    )
    _assert_unchanged(res, found, _reference(tmp_path, "git"))


def test_ancestor_pyproject_rule_pack_blanks_names(tmp_path, home):
    """CLASS 3: the ancestor's planted pyproject.toml loads a planted rule pack (rule-packs = ["evil.toml"]) that replaces the speculator bases and the sink with names nothing uses. EXPECT: the same findings as without the planted files."""
    xyz = _planted_parent(tmp_path)
    proj = _project(xyz, "git")
    _plant(xyz / "pyproject.toml", '[tool.specguard]\nrule-packs = ["evil.toml"]\n')
    _plant(
        xyz / "evil.toml",
        '[speculators]\nreplace = true\nbases = ["NothingAtAll"]\nshared_helpers = ["_nothing"]\n\n'
        '[metadata]\nreplace = true\nsink = ["nothing_sink"]\ntoken_count_params = ["nothing"]\n',
    )
    res, found = check_json(["check", "pkg", "-n"], proj, home, proj)
    _assert_unchanged(res, found, _reference(tmp_path, "git"))


def test_ancestor_specguard_toml_names(tmp_path, home):
    """CLASS 3: the ancestor holds .specguard.toml, specguard.toml and .specguard/config.toml (ruff-style dedicated names) turning every rule off, in both the bare and the [tool.specguard] form; the project has its own .git. EXPECT: the same findings as without them."""
    xyz = _planted_parent(tmp_path)
    proj = _project(xyz, "git")
    body = 'select = ["SG202"]\nper-file-ignores = { "*" = ["SG1"] }\n\n[tool.specguard]\nselect = ["SG202"]\n'
    for name in (".specguard.toml", "specguard.toml"):
        _plant(xyz / name, body)
    _plant(xyz / ".specguard" / "config.toml", body)
    res, found = check_json(["check", "pkg", "-n"], proj, home, proj)
    _assert_unchanged(res, found, _reference(tmp_path, "git"))


def test_ancestor_dot_ignore_file(tmp_path, home):
    """CLASS 3: the world-writable ancestor holds a planted .ignore (and .gitignore) with `*.py` and `pkg/`; the project has its own .git. EXPECT: the same findings as without the planted ignore files."""
    xyz = _planted_parent(tmp_path)
    proj = _project(xyz, "git")
    _plant(xyz / ".ignore", "*.py\npkg/\n")
    _plant(xyz / ".gitignore", "*\n")
    res, found = check_json(["check", "pkg", "-n"], proj, home, proj)
    _assert_unchanged(res, found, _reference(tmp_path, "git"))


def test_in_project_subfolder_pyproject_owned_by_other_user(tmp_path, home):
    """CLASS 3: inside the project, pkg/pyproject.toml (the nearest one to the checked path) is owned by another user and ignores every code; the project root has its own .git. EXPECT: the same findings as without it, or exit 2 with one error line naming it."""
    proj = _project(tmp_path, "git")
    planted = proj / "pkg" / "pyproject.toml"
    _plant(planted, '[tool.specguard]\nper-file-ignores = { "*" = ["SG1", "SG2"] }\n')
    res, found = check_json(["check", "pkg", "-n"], proj, home, proj)
    ref = _reference(tmp_path, "git")
    _assert_unchanged(res, found, ref, planted)


def test_in_project_world_writable_pyproject(tmp_path, home):
    """CLASS 3: the project's own pyproject.toml is world-writable (0666) and another user added [tool.specguard] select = ["SG202"] to it. EXPECT: the same findings as the project without that table, or exit 2 with one error line naming the file."""
    proj = _project(tmp_path, "pyproject")
    planted = proj / "pyproject.toml"
    planted.write_text(planted.read_text() + '\n[tool.specguard]\nselect = ["SG202"]\n')
    os.chmod(planted, 0o666)
    res, found = check_json(["check", "pkg", "-n"], proj, home, proj)
    _assert_unchanged(res, found, _reference(tmp_path, "pyproject"), planted)


def test_in_project_other_user_pyproject_moves_cache(tmp_path, home):
    """CLASS 3: the project's pyproject.toml belongs to another user and sets cache-dir = "drop/here", where drop/ is that user's world-writable folder. EXPECT: nothing is written under drop/here (findings unchanged, or exit 2 naming the file)."""
    proj = _project(tmp_path, "git")
    planted = proj / "pyproject.toml"
    _plant(planted, '[tool.specguard]\ncache-dir = "drop/here"\n')
    drop = proj / "drop"
    drop.mkdir()
    os.chown(drop, NOBODY, NOBODY)
    os.chmod(drop, 0o777)
    res, found = check_json(["check", "pkg"], proj, home, proj)
    assert not (drop / "here").exists(), (
        f"specguard wrote its cache into the other user's folder: {sorted(map(str, drop.rglob('*')))}\n{res.describe()}"
    )
    _assert_unchanged(res, found, _reference(tmp_path, "git"), planted)

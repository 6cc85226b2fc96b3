"""Class 3: settings, ignore files and rule packs found by looking up: above the project's root, inside it but
owned by another user or writable by others, reached through another user's symlinks, nested projects."""

import os

from sg2harness import (
    OTHER_GID,
    OTHER_UID,
    SG201_SRC,
    assert_good_findings,
    assert_no_crash,
    assert_one_line_error,
    make_project,
    run_cli,
    write_tree,
)

# settings that, if read, hide every finding (checked: as a project's own settings they give "All checks passed!")
HIDE = '[tool.specguard]\nper-file-ignores = { "*" = ["SG"] }\n'
BLIND_PACK = (
    '[speculators]\nreplace = true\nbases = ["NoSuchBase"]\n'
    '[metadata]\nreplace = true\nsink = ["no_such_sink"]\n'
    '[kv_groups]\nreplace = true\nflags = ["no_such_flag"]\n'
)


def check_json(root, *extra, cwd=None):
    return run_cli(["check", *extra, "--output-format", "json"], cwd or root)


def test_pyproject_above_git_root_not_read(work):
    """CLASS 3: a pyproject.toml that hides everything sits in the folder above the project's root (the root holds `.git`), as in a shared /tmp. EXPECT: it is not read: the three findings are reported (rc 1)."""
    outer = work / "outer"
    root = make_project(outer / "proj")
    (outer / "pyproject.toml").write_text(HIDE)
    res = check_json(root, ".")
    assert_good_findings(res, root)


def test_monorepo_inner_project_ignores_outer_settings(work):
    """CLASS 3: a monorepo: mono/pyproject.toml hides everything; mono/services/inner has its own pyproject.toml (no [tool.specguard] table), so inner is the project's root; run from mono on `services/inner`. EXPECT: mono's settings are not read: the three findings are reported (rc 1)."""
    mono = work / "mono"
    mono.mkdir()
    (mono / ".git").mkdir()
    (mono / "pyproject.toml").write_text(HIDE)
    inner = make_project(mono / "services" / "inner", {"pyproject.toml": '[project]\nname = "inner"\n'}, git=False)
    res = run_cli(["check", "services/inner", "--output-format", "json"], mono)
    assert_good_findings(res, inner)


def test_pyproject_owned_by_other_user(work):
    """CLASS 3: the project's own pyproject.toml (hiding everything) belongs to another user. EXPECT: not read: the three findings are reported (rc 1) and a warning names pyproject.toml."""
    root = make_project(work / "proj", {"pyproject.toml": HIDE})
    os.chown(root / "pyproject.toml", OTHER_UID, OTHER_GID)
    res = check_json(root, ".")
    assert_good_findings(res, root)
    assert "pyproject.toml" in res.stderr, f"no warning names the settings file: {res!r}"


def test_pyproject_world_writable(work):
    """CLASS 3: the project's pyproject.toml (hiding everything) is ours but mode 0666. EXPECT: not read: the three findings are reported (rc 1) and a warning names it."""
    root = make_project(work / "proj", {"pyproject.toml": HIDE})
    os.chmod(root / "pyproject.toml", 0o666)
    res = check_json(root, ".")
    assert_good_findings(res, root)
    assert "pyproject.toml" in res.stderr, f"no warning names the settings file: {res!r}"


def test_pyproject_symlink_made_by_other_user(work):
    """CLASS 3: the project's pyproject.toml is a symlink another user made (lchown 65534), pointing at a file of ours outside the project whose settings hide everything. EXPECT: the settings are not taken from it: the three findings are reported (rc 1)."""
    root = make_project(work / "proj")
    (work / "elsewhere").mkdir()
    (work / "elsewhere" / "settings.toml").write_text(HIDE)
    os.symlink(work / "elsewhere" / "settings.toml", root / "pyproject.toml")
    os.lchown(root / "pyproject.toml", OTHER_UID, OTHER_GID)
    res = check_json(root, ".")
    assert_good_findings(res, root)


def test_ignore_file_owned_by_other_user(work):
    """CLASS 3: an `.ignore` file excluding `*.py`, in the project's `pkg/`, belongs to another user. EXPECT: it is not honoured: the three findings are reported (rc 1)."""
    root = make_project(work / "proj", {"pkg/.ignore": "*.py\n"})
    os.chown(root / "pkg" / ".ignore", OTHER_UID, OTHER_GID)
    res = check_json(root, ".")
    assert_good_findings(res, root)


def test_gitignore_world_writable(work):
    """CLASS 3: the project's `.gitignore` (root holds `.git`), excluding `pkg/`, is ours but mode 0666 (anyone may have written it). EXPECT: it is not honoured: the three findings are reported (rc 1)."""
    root = make_project(work / "proj", {".gitignore": "pkg/\n"})
    os.chmod(root / ".gitignore", 0o666)
    res = check_json(root, ".")
    assert_good_findings(res, root)


def test_gitignore_of_enclosing_repository_above_root(work):
    """CLASS 3: the project (root: its own pyproject.toml) lies inside another git checkout whose `.gitignore` and `.git/info/exclude`, above the project's root, exclude the project's files. EXPECT: they are not read: the three findings are reported (rc 1)."""
    outer = work / "outer"
    root = make_project(outer / "proj", {"pyproject.toml": '[project]\nname = "proj"\n'}, git=False)
    (outer / ".git" / "info").mkdir(parents=True)
    (outer / ".git" / "info" / "exclude").write_text("*.py\n")
    (outer / ".gitignore").write_text("proj/pkg/\n*.py\n")
    res = check_json(root, ".")
    assert_good_findings(res, root)


def test_rule_pack_owned_by_other_user(work):
    """CLASS 3: our pyproject.toml names `rule-packs = ["packs/fork.toml"]`; that pack belongs to another user and replaces every name so nothing matches. EXPECT: it never silently blinds the run: either rc 2 with one error line, or the three findings are reported (rc 1)."""
    root = make_project(work / "proj", {"pyproject.toml": '[tool.specguard]\nrule-packs = ["packs/fork.toml"]\n'})
    write_tree(root, {"packs/fork.toml": BLIND_PACK})
    os.chown(root / "packs" / "fork.toml", OTHER_UID, OTHER_GID)
    res = check_json(root, ".")
    if res.rc == 2:
        assert_one_line_error(res)
    else:
        assert_good_findings(res, root)


def test_rule_pack_folder_symlink_made_by_other_user(work):
    """CLASS 3: our pyproject.toml names `rule-packs = ["packs/fork.toml"]`; `packs` is a symlink another user made to a folder of theirs holding a blinding pack (both owned by 65534). EXPECT: never a silent blind run: rc 2 with one error line, or the three findings (rc 1)."""
    root = make_project(work / "proj", {"pyproject.toml": '[tool.specguard]\nrule-packs = ["packs/fork.toml"]\n'})
    theirs = work / "theirs"
    write_tree(theirs, {"fork.toml": BLIND_PACK})
    os.chown(theirs / "fork.toml", OTHER_UID, OTHER_GID)
    os.chown(theirs, OTHER_UID, OTHER_GID)
    os.symlink(theirs, root / "packs")
    os.lchown(root / "packs", OTHER_UID, OTHER_GID)
    res = check_json(root, ".")
    if res.rc == 2:
        assert_one_line_error(res)
    else:
        assert_good_findings(res, root)


def test_settings_in_current_folder_not_used_for_other_tree(work):
    """CLASS 3: run from a shared sticky folder (cwd) holding a pyproject.toml, `.ignore` and `.gitignore` that hide everything, on the absolute path of a project elsewhere (root marked by `.git`). EXPECT: nothing of the current folder is read: the three findings are reported (rc 1)."""
    root = make_project(work / "proj")
    shared = work / "shared"
    write_tree(shared, {"pyproject.toml": HIDE, ".ignore": "*.py\n", ".gitignore": "*.py\n"})
    os.chmod(shared, 0o1777)
    res = run_cli(["check", str(root), "--output-format", "json"], shared)
    assert_good_findings(res, root)


def test_ruff_toml_planted_above_root_changes_no_fix(work):
    """CLASS 3: a `ruff.toml` with `line-length = 30` (owned by another user) sits in a shared sticky folder above the project's root; fixes are laid out at the project's line length. EXPECT: it is not read: `--diff` prints exactly what it prints without the planted file."""
    shared = work / "shared"
    shared.mkdir()
    root = make_project(shared / "proj")
    control = run_cli(["check", "pkg/merge.py", "--diff", "-n"], root)
    assert_no_crash(control, (1,))
    (shared / "ruff.toml").write_text("line-length = 30\n")
    os.chown(shared / "ruff.toml", OTHER_UID, OTHER_GID)
    os.chmod(shared, 0o1777)
    res = run_cli(["check", "pkg/merge.py", "--diff", "-n"], root)
    assert_no_crash(res, (0, 1))
    assert res.out == control.out, (
        f"the planted ruff.toml changed the fix:\n{res.stdout}\n--- without it ---\n{control.stdout}"
    )
    assert (root / "pkg" / "merge.py").read_text() == SG201_SRC

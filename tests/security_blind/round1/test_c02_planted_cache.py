"""CLASS 2: an analysis cache planted or edited by another local user (simulated: files chowned to uid/gid
65534, or left group/world-writable) must never hide the victim's findings nor redirect the victim's writes."""

import json
import os
import shutil
from pathlib import Path

from sg1harness import (
    DSPARK_DCP_YAML,
    NOBODY,
    SG101_BAD,
    SG103_BAD,
    SG103_FIXED,
    assert_sane,
    cache_files,
    check_json,
    chown_tree,
    config_codes,
    decode_msgpack,
    diff_snapshots,
    encode_msgpack,
    forge_cache_folder,
    run_cli,
    snapshot,
    write,
)


def _project(tmp_path: Path, name="proj") -> Path:
    proj = tmp_path / name
    write(proj / ".git" / "HEAD", "ref: refs/heads/main\n")
    write(proj / "pkg" / "__init__.py", "")
    write(proj / "pkg" / "a.py", SG101_BAD)
    write(proj / "pkg" / "b.py", SG103_BAD)
    return proj


def _reference(proj, home, extra=()):
    res, found = check_json(["check", "pkg", *extra], proj, home, proj)
    assert res.rc == 1 and found, f"cannot set up the attack: the victim's cold run found nothing\n{res.describe()}"
    codes = {c for c, *_ in found}
    assert {"SG101", "SG103"} <= codes, f"cannot set up the attack: unexpected reference findings {found}"
    return found


def _victim_again(proj, home, ref, extra=(), env=None):
    res, found = check_json(["check", "pkg", *extra], proj, home, proj, env=env)
    assert_sane(res, rcs=(1, 2))
    if res.rc == 2:
        # refusing the planted cache with an error is not hiding a finding, but it must say why in one line
        assert len([ln for ln in res.err.splitlines() if "error" in ln]) == 1, res.describe()
        return res
    assert found == ref, f"planted cache changed the victim's findings:\nwas  {ref}\nnow  {found}\n{res.describe()}"
    return res


def _forge(cache_root):
    n = forge_cache_folder(cache_root)
    assert n > 0, f"cannot set up the attack: nothing to forge under {cache_root}: {cache_files(cache_root)}"


def test_forged_results_owned_by_other_user(tmp_path, home):
    """CLASS 2: after the victim's run, another user rewrites the cache files (msgpack decoded, findings/judgements/scans emptied, re-encoded) and owns them (uid 65534). EXPECT: the victim's next run reports the same findings (exit 1)."""
    proj = _project(tmp_path)
    ref = _reference(proj, home)
    cache = proj / ".specguard_cache"
    _forge(cache)
    for f in cache_files(cache):
        os.chown(f, NOBODY, NOBODY)
    _victim_again(proj, home, ref)


def test_forged_results_world_writable_files(tmp_path, home):
    """CLASS 2: the victim's cache files are world-writable (0666, a umask 000 shell) and another user edited their content to drop every finding; the files stay owned by the victim. EXPECT: the victim's next run reports the same findings."""
    proj = _project(tmp_path)
    ref = _reference(proj, home)
    cache = proj / ".specguard_cache"
    _forge(cache)
    for f in cache_files(cache):
        os.chmod(f, 0o666)
    _victim_again(proj, home, ref)


def test_cache_folder_owned_by_other_user(tmp_path, home):
    """CLASS 2: the whole .specguard_cache folder (folders 0777, files 0644) belongs to another user and holds a forged cache with every finding dropped. EXPECT: the victim's run reports the same findings."""
    proj = _project(tmp_path)
    ref = _reference(proj, home)
    cache = proj / ".specguard_cache"
    _forge(cache)
    chown_tree(cache)
    for dirpath, dirnames, filenames in os.walk(cache):
        os.chmod(dirpath, 0o777)
    _victim_again(proj, home, ref)


def test_world_writable_cache_folder_with_planted_version_folder(tmp_path, home):
    """CLASS 2: the victim's .specguard_cache is world-writable (0777, owned by the victim); another user replaced its version folder by their own (uid 65534) holding a forged cache. EXPECT: the victim's run reports the same findings."""
    proj = _project(tmp_path)
    ref = _reference(proj, home)
    cache = proj / ".specguard_cache"
    os.chmod(cache, 0o777)
    versions = [p for p in cache.iterdir() if p.is_dir()]
    assert versions, f"cannot set up the attack: no version folder in {cache}"
    for v in versions:
        planted = v.with_name(v.name + ".planted")
        shutil.copytree(v, planted)
        _forge(planted)
        shutil.rmtree(v)
        planted.rename(v)
        chown_tree(v)
    _victim_again(proj, home, ref)


def test_same_size_same_mtime_fixed_version_cache(tmp_path, home):
    """CLASS 2: another user with write access to a shared checkout swaps in a FIXED b.py of the same size and mtime, runs specguard with their own HOME to fill .specguard_cache, then puts the buggy b.py back with the same size and mtime; the cache stays theirs. No msgpack is edited. EXPECT: the victim's run reports the same findings as a clean run (SG103 in b.py included)."""
    proj = _project(tmp_path)
    clean_proj = _project(tmp_path, "clean")
    ref = _reference(clean_proj, home, ("-n",))
    b = proj / "pkg" / "b.py"
    bad = b.read_bytes()
    fixed = SG103_FIXED.encode()
    assert len(fixed) < len(bad)
    fixed = fixed + b"#" + b" " * (len(bad) - len(fixed) - 2) + b"\n"
    assert len(fixed) == len(bad)
    st = os.stat(b)
    b.write_bytes(fixed)
    os.utime(b, ns=(st.st_atime_ns, st.st_mtime_ns))
    attacker_home = tmp_path / "attacker-home"
    a = run_cli(["check", "pkg"], proj, attacker_home)
    assert a.rc == 1 and "SG103" not in a.out, f"cannot set up the attack: attacker run\n{a.describe()}"
    b.write_bytes(bad)
    os.utime(b, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert (proj / ".specguard_cache").is_dir(), "cannot set up the attack: the attacker's run left no cache"
    chown_tree(proj / ".specguard_cache")
    _victim_again(proj, home, ref)


def test_cli_cache_dir_in_shared_tmp_owned_by_other_user(tmp_path, home):
    """CLASS 2: a CI script passes --cache-dir to a folder in a shared sticky /tmp-like folder; another user owns that cache folder (0777) and forged its content. EXPECT: the victim's run reports the same findings."""
    proj = _project(tmp_path)
    shared = tmp_path / "shared-tmp"
    shared.mkdir()
    os.chmod(shared, 0o1777)
    cache = shared / "specguard-cache"
    ref = _reference(proj, home, ("--cache-dir", str(cache)))
    _forge(cache)
    chown_tree(cache)
    for dirpath, dirnames, filenames in os.walk(cache):
        os.chmod(dirpath, 0o777)
    _victim_again(proj, home, ref, ("--cache-dir", str(cache)))


def test_cli_cache_dir_planted_symlinks_redirect_writes(tmp_path, home):
    """CLASS 2: in a shared --cache-dir owned by another user, every cache file and the .gitignore are replaced by that user's symlinks to files of the victim (e.g. ~/.bashrc); the victim then changes a source file so the cache is rewritten. EXPECT: the victim's files are byte-identical afterwards and the findings are those of a clean run."""
    proj = _project(tmp_path)
    shared = tmp_path / "shared-tmp"
    shared.mkdir()
    os.chmod(shared, 0o1777)
    cache = shared / "specguard-cache"
    _reference(proj, home, ("--cache-dir", str(cache)))
    victim_files = tmp_path / "victim-home-files"
    targets = []
    for p in sorted(cache.rglob("*")):
        if p.is_file():
            t = write(victim_files / f"{len(targets)}-{p.name}.rc", f"victim data {p.name}\n")
            targets.append(t)
            p.unlink()
            os.symlink(t, p)
            os.lchown(p, NOBODY, NOBODY)
    assert targets, f"cannot set up the attack: no cache files under {cache}"
    chown_tree(cache)
    for dirpath, dirnames, filenames in os.walk(cache):
        os.chmod(dirpath, 0o777)
    before = snapshot(victim_files)
    write(proj / "pkg" / "c.py", SG101_BAD.replace("MyDraftSpeculator", "ThirdDraftSpeculator"))
    clean_proj = _project(tmp_path, "clean")
    write(clean_proj / "pkg" / "c.py", SG101_BAD.replace("MyDraftSpeculator", "ThirdDraftSpeculator"))
    ref = _reference(clean_proj, tmp_path / "clean-home", ("-n",))
    res = _victim_again(proj, home, ref, ("--cache-dir", str(cache)))
    diff = diff_snapshots(before, snapshot(victim_files))
    assert not diff, f"the victim's files were written through the planted links: {diff}\n{res.describe()}"


def test_config_owned_by_other_user_points_cache_at_forged_folder(tmp_path, home):
    """CLASS 2: the project's pyproject.toml (cache-dir = ".cachex") and the .cachex folder it names both belong to another user, and .cachex holds a forged cache dropping every finding. EXPECT: the victim's run reports the same findings (or refuses with one error line)."""
    proj = _project(tmp_path)
    write(proj / "pyproject.toml", '[tool.specguard]\ncache-dir = ".cachex"\n')
    ref = _reference(proj, home)
    cache = proj / ".cachex"
    assert cache.is_dir(), f"cannot set up the attack: no cache at {cache}"
    _forge(cache)
    chown_tree(cache)
    os.chown(proj / "pyproject.toml", NOBODY, NOBODY)
    _victim_again(proj, home, ref)


def test_cache_files_replaced_by_links_to_forged_copies(tmp_path, home):
    """CLASS 2: another user replaces each cache file with a symlink (owned by them) to a forged copy in their own folder. EXPECT: the victim's run reports the same findings."""
    proj = _project(tmp_path)
    ref = _reference(proj, home)
    cache = proj / ".specguard_cache"
    evil = tmp_path / "attacker-files"
    evil.mkdir()
    for f in cache_files(cache):
        f = Path(f)
        forged = evil / f.name
        forged.write_bytes(f.read_bytes())
        f.unlink()
        os.symlink(forged, f)
        os.lchown(f, NOBODY, NOBODY)
    _forge(evil)
    chown_tree(evil)
    _victim_again(proj, home, ref)


def test_shared_xdg_cache_validated_pack_forged(tmp_path, home):
    """CLASS 2: XDG_CACHE_HOME is a shared folder; the specguard/ folder in it (validated packs, cache-key) belongs to another user, who rewrote the validated pack so its speculator bases, sink and helpers name nothing. EXPECT: the victim's run (project cache off, -n) reports the same findings."""
    proj = _project(tmp_path)
    xdg = tmp_path / "xdg-shared"
    xdg.mkdir()
    os.chmod(xdg, 0o1777)
    env = {"XDG_CACHE_HOME": str(xdg)}
    res, ref = check_json(["check", "pkg", "-n"], proj, home, proj, env=env)
    assert res.rc == 1 and ref, res.describe()
    packs = sorted((xdg / "specguard").rglob("pack-*.msgpack"))
    assert packs, f"cannot set up the attack: no validated pack under {xdg}: {sorted(map(str, xdg.rglob('*')))}"

    def blank(o):
        if isinstance(o, dict):
            return {
                k: (["NoSuchName"] if isinstance(v, list) and v and all(isinstance(x, str) for x in v) else blank(v))
                for k, v in o.items()
            }
        if isinstance(o, list):
            return [blank(x) for x in o]
        return o

    for p in packs:
        p.write_bytes(encode_msgpack(blank(decode_msgpack(p))))
    chown_tree(xdg / "specguard")
    for dirpath, dirnames, filenames in os.walk(xdg / "specguard"):
        os.chmod(dirpath, 0o777)
    res2, found = check_json(["check", "pkg", "-n"], proj, home, proj, env=env)
    assert_sane(res2, rcs=(1, 2))
    if res2.rc == 1:
        assert found == ref, f"forged validated pack changed the findings:\nwas {ref}\nnow {found}\n{res2.describe()}"


def test_config_check_cache_in_shared_xdg_forged(tmp_path, home, vllm_copy, vllm_clean_verdict):
    """CLASS 2: `specguard config` keeps its check cache of the served vLLM under XDG_CACHE_HOME/specguard/check; with XDG_CACHE_HOME shared, another user owns that folder and emptied every judgement (dropping the SG201 behind CFG104). EXPECT: the victim's verdict keeps the same hazard codes as a clean run (CFG102, CFG104)."""
    xdg = tmp_path / "xdg-shared"
    xdg.mkdir()
    os.chmod(xdg, 0o1777)
    env = {"XDG_CACHE_HOME": str(xdg)}
    cfg = write(tmp_path / "dspark-dcp.yaml", DSPARK_DCP_YAML)
    args = ["config", str(cfg), "--vllm-source", str(vllm_copy), "--format", "json"]
    first = run_cli(args, tmp_path, home, env=env)
    assert first.rc == 1 and config_codes(first) == vllm_clean_verdict, first.describe()
    check_cache = xdg / "specguard" / "check"
    assert cache_files(check_cache), f"cannot set up the attack: no check cache under {check_cache}"
    _forge(check_cache)
    chown_tree(xdg / "specguard")
    for dirpath, dirnames, filenames in os.walk(xdg / "specguard"):
        os.chmod(dirpath, 0o777)
    res = run_cli(args, tmp_path, home, env=env)
    assert_sane(res, rcs=(1, 2))
    if res.rc == 1:
        assert config_codes(res) == vllm_clean_verdict, (
            f"planted check cache changed the verdict: {config_codes(res)} vs {vllm_clean_verdict}\n{res.describe()}"
        )
    else:
        assert "CFG" not in res.out or json.loads(res.out or "[]") == [], res.describe()

"""Whether a file found on disk is the running user's own to trust: who owns it and who else may write it.

A file specguard finds by looking (not one the user named) decides what is checked; one that another user owns, or
that others may write, may have been put there by someone else (a checkout in a shared folder, a world-writable
/tmp above it). Files of root are trusted as system files are. Group write is someone else's write unless the
group is the owner's private group (distributions with user private groups give every file mode 0664).
"""

from __future__ import annotations

import os
import stat


def untrusted(st: os.stat_result, *, system_ok: bool = True) -> str | None:
    """Why a file or folder with this status may hold someone else's words (a short reason), or None when it is
    the running user's (or, with `system_ok`, root's: settings may be system files, a cache never is) and no one
    else may write it."""
    me = os.geteuid()
    if st.st_uid != me and not (system_ok and st.st_uid == 0):
        return f"it belongs to user id {st.st_uid}, not to you"
    mode = stat.S_IMODE(st.st_mode)
    if mode & stat.S_IWOTH:
        return f"anyone may write it (mode {mode:04o})"
    if mode & stat.S_IWGRP and not _private_group(st.st_gid, st.st_uid):
        return f"its group (id {st.st_gid}) may write it (mode {mode:04o})"
    return None


def untrusted_found(path: str | os.PathLike[str], st: os.stat_result) -> str | None:
    """Why a settings-like file specguard found in a tree, not named by the user (pyproject.toml, `.ignore`,
    `.gitignore`, `.git/info/exclude`, a rule pack its settings name, ruff's configuration for the layout of
    fixes), may hold someone else's words: the file as opened (`st`), or a symlink on the way to it that another
    user made. The one trust check every such file passes; the caller warns with the reason and does not use it."""
    return untrusted(st) or untrusted_link(path)


def untrusted_link(path: str | os.PathLike[str]) -> str | None:
    """Why `path` may point where someone else chose: it, or a folder on the way to it, is a symlink another user
    made."""
    here = os.path.abspath(path)
    while True:
        maker = _link_maker(here)
        if maker is not None:
            return (
                f"it is a symlink that user id {maker} made"
                if here == os.path.abspath(path)
                else f"{here} on the way to it is a symlink that user id {maker} made"
            )
        parent = os.path.dirname(here)
        if parent == here:
            return None
        here = parent


def _link_maker(path: str) -> int | None:
    """The user id of whoever made `path` when it is a symlink neither the user nor root made."""
    try:
        st = os.lstat(path)
    except OSError:
        return None
    return st.st_uid if stat.S_ISLNK(st.st_mode) and st.st_uid not in (os.geteuid(), 0) else None


def _private_group(gid: int, uid: int) -> bool:
    """Whether `gid` is the user private group of `uid`: its primary group, named as the user, with no other
    member listed."""
    name, group = _user_name(uid), _group(gid)
    if name is None or group is None or _primary_gid(uid) != gid:
        return False
    group_name, members = group
    return group_name == name and set(members) <= {name}


def _user_name(uid: int) -> str | None:
    import pwd

    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return None


def _primary_gid(uid: int) -> int | None:
    import pwd

    try:
        return pwd.getpwuid(uid).pw_gid
    except KeyError:
        return None


def _group(gid: int) -> tuple[str, list[str]] | None:
    import grp

    try:
        entry = grp.getgrgid(gid)
    except KeyError:
        return None
    return entry.gr_name, list(entry.gr_mem)

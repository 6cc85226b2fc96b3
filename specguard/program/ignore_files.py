"""What `.gitignore`, `.git/info/exclude` and `.ignore` files exclude, read as git reads them and combined as ruff
combines them (through ripgrep's `ignore` crate). The files are data: their patterns become regular expressions
here, and git itself is never run (a repository's config can make git run commands).

Precedence, as in ruff: `.ignore` files over `.gitignore` files over `.git/info/exclude`; among files of one kind,
the deepest folder's; within a file, the last matching pattern (`!pattern` re-includes). `.gitignore` and
`.git/info/exclude` count only inside a git repository, and only up to its root; `.ignore` files count anywhere
in the project. None is read above the project's root (`specguard.project`), whatever ruff does: a folder that
holds the checkout may be writable by others; and none inside it that someone else may have written
(`specguard.ownership`): that one is warned about and not used.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass

from specguard._files import DATA_CAP, UnreadableFile, read_regular_stat
from specguard.ownership import untrusted_found
from specguard.project import project_top


def _translate(glob: str) -> str:
    """A gitignore glob (no leading `!`, no trailing `/`) as a regular expression: over a name for a glob without
    a `/` (git matches those at any depth, against the name), else over the `/`-separated path relative to the
    ignore file's folder. `*`, `?` and `[...]` never cross a `/`; `**` does where git says so."""
    glob = glob.removeprefix("/")
    out, i = [], 0
    while i < len(glob):
        c = glob[i]
        if glob.startswith("**", i) and (i == 0 or glob[i - 1] == "/") and (i + 2 == len(glob) or glob[i + 2] == "/"):
            if i + 2 == len(glob):
                out.append(".*")  # trailing `/**`: everything inside
                i += 2
            else:
                out.append("(?:.*/)?")  # leading `**/` or `/**/`: any number of folders
                i += 3
            continue
        if c == "*":
            while i < len(glob) and glob[i] == "*":
                i += 1  # other runs of asterisks are one asterisk
            out.append("[^/]*")
            continue
        if c == "?":
            out.append("[^/]")
        elif c == "[" and (end := _class_end(glob, i)) is not None:
            out.append(_class(glob[i + 1 : end]))
            i = end
        elif c == "\\" and i + 1 < len(glob):
            i += 1
            out.append(re.escape(glob[i]))
        else:
            out.append(re.escape(c))
        i += 1
    return "".join(out)


_POSIX_CLASSES = {
    "alnum": "a-zA-Z0-9",
    "alpha": "a-zA-Z",
    "blank": " \\t",
    "digit": "0-9",
    "lower": "a-z",
    "space": " \\t\\n\\r\\f\\v",
    "upper": "A-Z",
    "xdigit": "0-9a-fA-F",
}


def _class(body: str) -> str:
    """A bracket expression's body (between `[` and `]`) as a regex class that never matches `/`."""
    negate = body[:1] in ("!", "^")
    body = body[1:] if negate else body
    out, i = [], 0
    while i < len(body):
        if body[i] == "[" and (m := re.match(r"\[:([a-z]+):\]", body[i:])) and m.group(1) in _POSIX_CLASSES:
            out.append(_POSIX_CLASSES[m.group(1)])
            i += m.end()
            continue
        escaped = body[i] == "\\" and i + 1 < len(body)
        i += escaped
        out.append("-" if body[i] == "-" and not escaped else re.escape(body[i]))  # an unescaped `-` is a range
        i += 1
    return f"(?!/)[{'^' if negate else ''}{''.join(out)}]"


def _class_end(glob: str, start: int) -> int | None:
    """Index of the `]` closing the class that opens at `start`, or None (then `[` is literal)."""
    i = start + 1
    if i < len(glob) and glob[i] in "!^":
        i += 1
    if i < len(glob) and glob[i] == "]":
        i += 1  # a `]` first in the class is literal
    while i < len(glob):
        if glob[i] == "\\":
            i += 2
            continue
        if glob[i] == "[" and (m := re.match(r"\[:[a-z]+:\]", glob[i:])):
            i += m.end()  # a POSIX class inside the brackets
            continue
        if glob[i] == "]":
            return i
        i += 1
    return None


_SPECIAL = frozenset("*?[\\")


@dataclass(frozen=True)
class _Pattern:
    glob: str
    regex: re.Pattern[str]
    on_name: bool  # no `/`: matched against the name, at any depth
    negated: bool
    dir_only: bool


def _strip_trailing_spaces(line: str) -> str:
    """Trailing spaces are dropped unless escaped with a backslash (`foo\\ ` keeps one)."""
    stripped = line.rstrip(" ")
    if stripped.endswith("\\") and len(stripped) < len(line):
        return stripped + " "
    return stripped


def _parse(text: str) -> list[_Pattern]:
    patterns = []
    for raw in text.splitlines():
        line = _strip_trailing_spaces(raw.rstrip("\r"))
        if not line or line.startswith("#"):
            continue
        negated = line.startswith("!")
        if negated:
            line = line[1:]
        dir_only = line.endswith("/") and not line.endswith("\\/")
        if dir_only:
            line = line.rstrip("/")
        if not line:
            continue
        try:
            regex = re.compile(_translate(line), re.DOTALL)
        except re.error:
            continue  # a pattern git could not use either (a reversed range, `[z-a]`)
        patterns.append(_Pattern(line, regex, "/" not in line, negated, dir_only))
    return patterns


_ANY_DEPTH = "(?:.*/)?"


def _any(patterns: list[_Pattern]) -> re.Pattern[str] | None:
    """One expression matching where any of `patterns` does. Those that start at any depth (`**/x`) share that
    start, so the expression walks back over the path's folders once, not once per pattern."""
    if not patterns:
        return None
    deep = [p.regex.pattern[len(_ANY_DEPTH) :] for p in patterns if p.regex.pattern.startswith(_ANY_DEPTH)]
    rest = [p.regex.pattern for p in patterns if not p.regex.pattern.startswith(_ANY_DEPTH)]
    parts = [*(f"(?:{r})" for r in rest), *([f"{_ANY_DEPTH}(?:{'|'.join(deep)})"] if deep else [])]
    return re.compile("|".join(parts), re.DOTALL)


class IgnoreFile:
    """One file's patterns; `decide` answers for a path relative to the folder the file applies to.

    Most paths match no pattern, and a file can hold hundreds: a first pass tells those apart cheaply (literal names
    by a set, `*.ext` names by one `endswith`, the rest by one expression for names and one for paths); only a path
    that some pattern matches is walked through the patterns to find the last one that does."""

    def __init__(self, text: str) -> None:
        self.patterns = _parse(text)
        names, suffixes, other_names, paths = [], [], [], []
        for p in self.patterns:
            if not p.on_name:
                paths.append(p)
            elif not _SPECIAL & set(p.glob):
                names.append(p.glob)
            elif p.glob[:1] == "*" and not _SPECIAL & set(p.glob[1:]):
                suffixes.append(p.glob[1:])
            else:
                other_names.append(p)
        self.names, self.suffixes = frozenset(names), tuple(suffixes)
        self.name_any, self.path_any = _any(other_names), _any(paths)

    def _hit(self, rel: str, name: str) -> bool:
        return (
            name in self.names
            or (bool(self.suffixes) and name.endswith(self.suffixes))
            or (self.name_any is not None and self.name_any.fullmatch(name) is not None)
            or (self.path_any is not None and self.path_any.fullmatch(rel) is not None)
        )

    def decide(self, rel: str, is_dir: bool) -> bool | None:
        """True: ignored; False: re-included by a `!` pattern; None: no pattern matches."""
        name = rel.rpartition("/")[2]
        if not self._hit(rel, name):
            return None
        for pattern in reversed(self.patterns):
            if (is_dir or not pattern.dir_only) and pattern.regex.fullmatch(name if pattern.on_name else rel):
                return not pattern.negated
        return None


def _read(path: str, refused: list[str]) -> IgnoreFile | None:
    """The file's patterns; None for one that is missing, not a regular file (a FIFO), too large (as if absent),
    or that someone else may have written (said in `refused`: it would choose what is not checked)."""
    try:
        data, st = read_regular_stat(path, DATA_CAP)
    except UnreadableFile:
        return None
    why = untrusted_found(path, st)
    if why is not None:
        refused.append(f"{path} was not read ({why}): someone else may have written what it excludes from the check")
        return None
    return IgnoreFile(data.decode("utf-8", "surrogateescape"))  # names from os.scandir decode the same way


@dataclass(frozen=True)
class Level:
    """The ignore files of one folder (`path`, absolute), and whether it is a git repository's root."""

    path: str
    files: tuple[IgnoreFile | None, IgnoreFile | None, IgnoreFile | None]  # .ignore, .gitignore, info/exclude
    has_git: bool

    @classmethod
    def of(cls, path: str, refused: list[str], names: set[str] | None = None) -> Level | None:
        """The level of a folder; `names` are its entries when the caller listed them (saves the lookups); ignore
        files not read because someone else may have written them are said in `refused`."""

        def present(name: str) -> bool:
            return name in names if names is not None else os.path.lexists(os.path.join(path, name))

        has_git = present(".git")
        files = (
            _read(os.path.join(path, ".ignore"), refused) if present(".ignore") else None,
            _read(os.path.join(path, ".gitignore"), refused) if present(".gitignore") else None,
            _read(os.path.join(path, ".git", "info", "exclude"), refused) if has_git else None,
        )
        if not has_git and files == (None, None, None):
            return None
        return cls(path, files, has_git)


class Ignores:
    """The levels that apply below one folder: the folder's ancestors' and its own, deepest last. `refused`, shared
    by every Ignores entered from one walk's first: the ignore files not read, one warning each."""

    def __init__(self, levels: tuple[Level, ...], refused: list[str] | None = None) -> None:
        self.levels = levels
        self.in_git = any(level.has_git for level in levels)
        self.refused = [] if refused is None else refused

    @classmethod
    def enclosing(cls, folder: str) -> Ignores:
        """The levels of the folders above `folder` (an absolute path), up to the project's root and never above
        it: ignore files in a shared folder that holds the checkout are not the project's."""
        top = project_top(folder)
        refused: list[str] = []
        if top is None or top == folder:
            return cls((), refused)
        chain = []
        here = os.path.dirname(folder)
        while True:
            if (level := Level.of(here, refused)) is not None:
                chain.append(level)
            if here == top:
                break
            here = os.path.dirname(here)
        return cls(tuple(reversed(chain)), refused)

    def enter(self, folder: str, names: set[str]) -> Ignores:
        """The levels for `folder`'s entries: these plus the folder's own files."""
        level = Level.of(folder, self.refused, names)
        return self if level is None else Ignores((*self.levels, level), self.refused)

    def ignored(self, path: str, is_dir: bool) -> bool:
        """Whether the ignore files exclude `path` (absolute, inside the deepest level's folder)."""
        if not self.levels:
            return False
        decided: list[bool | None] = [None, None, None]
        git_done = False  # .gitignore files above a repository's root do not apply inside it
        for level in reversed(self.levels):
            rel = path[len(level.path) :].lstrip("/")
            for kind, file in enumerate(level.files):
                if file is None or decided[kind] is not None or (kind and (git_done or not self.in_git)):
                    continue
                decided[kind] = file.decide(rel, is_dir)
            git_done = git_done or level.has_git
        return next((d for d in decided if d is not None), False)

"""The adversarial corpus (tests/corpus/advspec): functions written from idioms of real vLLM and SGLang code, each
marked `# expect: SGxxx` (it has that bug) or `# expect: clean`. `specguard check` runs on it as a user would (the
package beside vLLM 0.28.0's real tree, JSON output) and recall and false positives are counted per function:
a bug counts as found when a finding of its code lies inside the function, a correct function is a false positive
when any finding lies inside it. docs/check.md and the README state the numbers this test measures."""

from __future__ import annotations

import ast
import json
import re
import shutil
from dataclasses import dataclass, field
from pathlib import Path

CORPUS = Path(__file__).resolve().parent / "corpus" / "advspec"
CHECK_PAGE = Path(__file__).resolve().parents[1] / "docs" / "check.md"
README = Path(__file__).resolve().parents[1] / "README.md"
_EXPECT = re.compile(r"#\s*expect:\s*(clean|SG\d{3})\s*$")


@dataclass
class Case:
    module: str
    qualname: str
    lines: tuple[int, int]
    expected: str  # "clean" or a code
    found: set[str] = field(default_factory=set)


def corpus_cases(folder: Path = CORPUS) -> list[Case]:
    """Every function of the corpus with an `# expect:` comment right above its `def` (or its decorators), or among
    the comments that open its body (after its docstring), in its modules and its subpackages' (a case's module is
    its path in the corpus, `dp/draft_worker`)."""
    cases = []
    for path in sorted(folder.rglob("*.py")):
        lines = path.read_text().splitlines()
        tree = ast.parse("\n".join(lines))

        def visit(body: list[ast.stmt], prefix: str, module: str, lines: list[str]) -> None:
            for node in body:
                if isinstance(node, ast.ClassDef):
                    visit(node.body, f"{prefix}{node.name}.", module, lines)
                elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    top = min([node.lineno, *(d.lineno for d in node.decorator_list)])
                    above = lines[top - 2] if top >= 2 else ""
                    match = _EXPECT.search(above) or _opening_label(node, lines)
                    if match:
                        end = node.end_lineno or node.lineno
                        cases.append(Case(module, prefix + node.name, (top, end), match.group(1)))

        visit(tree.body, "", path.relative_to(folder).with_suffix("").as_posix(), lines)
    return cases


def _opening_label(node: ast.FunctionDef | ast.AsyncFunctionDef, lines: list[str]) -> re.Match[str] | None:
    """An `# expect:` comment before the first statement of the body that is not its docstring (unless that is a
    definition: a comment above it labels that one)."""
    body = node.body
    docstring = isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant)
    first = body[1] if docstring and len(body) > 1 else body[0]
    if isinstance(first, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return None
    start = (body[0].end_lineno or body[0].lineno) if docstring else node.lineno
    for line in lines[start : first.lineno - 1]:
        if (match := _EXPECT.search(line)) is not None:
            return match
    return None


@dataclass
class Score:
    cases: list[Case]

    @property
    def bugs(self) -> list[Case]:
        return [c for c in self.cases if c.expected != "clean"]

    @property
    def correct(self) -> list[Case]:
        return [c for c in self.cases if c.expected == "clean"]

    @property
    def missed(self) -> list[Case]:
        return [c for c in self.bugs if c.expected not in c.found]

    @property
    def false_positives(self) -> list[Case]:
        return [c for c in self.correct if c.found]

    @property
    def recall(self) -> float:
        return 1 - len(self.missed) / len(self.bugs)

    def summary(self) -> str:
        return (
            f"recall {len(self.bugs) - len(self.missed)}/{len(self.bugs)} ({self.recall:.0%}), "
            f"false positives {len(self.false_positives)}/{len(self.correct)}"
        )


def score(findings: list[dict], root: Path, cases: list[Case], package: str = "advspec") -> Score:
    for finding in findings:
        rel = Path(finding["filename"]).resolve().relative_to(root.resolve())
        row = finding["location"]["row"]
        for case in cases:
            if rel == Path(package, f"{case.module}.py") and case.lines[0] <= row <= case.lines[1]:
                case.found.add(finding["code"])
    return Score(cases)


def run_corpus(cli, tmp_path: Path, vllm_root: Path, corpus: Path = CORPUS) -> Score:  # type: ignore[no-untyped-def]
    project = tmp_path / "project"
    shutil.copytree(corpus, project / "advspec")
    (project / "vllm").symlink_to(vllm_root)
    out = cli("check", "advspec", "--format", "json", "--no-cache", cwd=project)
    assert out.returncode in (0, 1), out.stderr
    assert out.stderr == ""  # no internal error, no note
    return score(json.loads(out.stdout), project, corpus_cases(corpus))


def test_the_corpus_has_the_size_the_issue_asks_for() -> None:
    cases = corpus_cases()
    bugs = [c for c in cases if c.expected != "clean"]
    assert len(cases) >= 60 and len(bugs) >= 30 and len(cases) - len(bugs) >= 30
    # every case names the real code its idiom comes from
    for path in CORPUS.glob("*.py"):
        text = path.read_text()
        assert text.count("# expect:") <= text.count("idiom:") + text.count("# idiom: the same"), path


def test_recall_and_false_positives_on_the_corpus(cli, tmp_path, vllm_source) -> None:  # type: ignore[no-untyped-def]
    result = run_corpus(cli, tmp_path, vllm_source("0.28.0"))
    report = "\n".join(
        [result.summary()]
        + [f"  missed {c.module}.{c.qualname} ({c.expected})" for c in result.missed]
        + [f"  false positive {c.module}.{c.qualname}: {sorted(c.found)}" for c in result.false_positives]
    )
    print(report)
    assert result.recall >= 0.9, report
    assert len(result.false_positives) <= 2, report
    for page in (CHECK_PAGE, README):  # the numbers the issue asks the README for, and the rules' page
        assert result.summary() in " ".join(page.read_text().split()), (page.name, report)

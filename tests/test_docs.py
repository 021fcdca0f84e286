"""The docs: every page says what it is for, and no results section holds a number typed by hand.

The runs' numbers come from the pipeline (docs/results.md, written by the `results` stage, and
metrics/<task>.md); a task page's "Results" section links to them and keeps only what its source
reports (the "What the source reports" subsection) and what each finding is read against (the
test column of its findings table). Everywhere else in the section a digit fails, except in
code spans and link targets.
"""

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
TASKS = ("expr", "abacus", "looped", "modular", "charlm")
SOURCE = "### What the source reports"
FINDINGS = "| finding | test |"
GENERATED = {"results.md"}   # written by the results stage


def section(text: str, title: str) -> str:
    """The body of the `## <title>` section, up to the next `## ` heading (AssertionError if the
    page has not exactly one)."""
    parts = re.split(r"^## ", text, flags=re.M)[1:]
    found = [p.split("\n", 1)[1] for p in parts if p.split("\n", 1)[0].strip() == title]
    assert len(found) == 1, f"expected one '## {title}' section, found {len(found)}"
    return found[0]


def typed_numbers(results: str) -> list[str]:
    """The lines of a results section that hold a digit outside what may hold one: the
    "What the source reports" subsection, the test column of the findings table, code spans
    and link targets."""
    kept, skipping = [], False
    for line in results.splitlines():
        if line.startswith("### "):
            skipping = line.strip() == SOURCE
        if skipping:
            continue
        kept.append(line)
    checked, in_findings = [], False   # (the text checked, the line it is from)
    for line in kept:
        if line.strip() == FINDINGS:
            in_findings = True
            continue
        if in_findings and line.startswith("|"):
            cells = line.strip().strip("|").split("|")
            assert len(cells) == 2, f"a findings row has a finding and a test only: {line}"
            checked.append((cells[0], line))   # the finding's name is checked, its test not
            continue
        in_findings = False
        checked.append((line, line))
    out = []
    for text, line in checked:
        bare = re.sub(r"`[^`]*`", "", text)            # code spans
        bare = re.sub(r"\]\([^)]*\)", "]", bare)       # link targets (the link text is checked)
        if re.search(r"\d", bare):
            out.append(line)
    return out


def results_section(page: str) -> str:
    return section((DOCS / page).read_text(), "Results")


@pytest.mark.parametrize("task", TASKS)
def test_a_task_pages_results_link_to_the_generated_ones(task):
    results = results_section(f"{task}.md")
    assert f"(results/{task}.md)" in results, "link the task's page of the results"
    assert f"(../metrics/{task}.md)" in results, "link the task's metrics table"
    assert re.search(rf"^{re.escape(SOURCE)}$", results, flags=re.M), f"no '{SOURCE}'"
    findings = results.split(FINDINGS, 1)
    assert len(findings) == 2, f"no findings table ({FINDINGS})"
    rows = re.findall(r"^\|(?!---).*\|$", findings[1].split("\n\n", 1)[0], flags=re.M)
    assert rows, "the findings table has no finding"


@pytest.mark.parametrize("task", TASKS)
def test_a_task_pages_findings_are_its_checks(task):
    """The page's findings table lists the task's checked findings (arithrepro/findings/),
    claim and test word for word, in their order."""
    from arithrepro.findings.registry import FINDINGS as CHECKS

    table = results_section(f"{task}.md").split(FINDINGS, 1)[1].split("\n\n", 1)[0]
    rows = [tuple(c.strip() for c in line.strip().strip("|").split("|"))
            for line in table.splitlines() if line.startswith("|") and not line.startswith("|---")]
    assert rows == [(f.claim, f.test) for f in CHECKS[task]]


@pytest.mark.parametrize("page", [f"{task}.md" for task in TASKS] + ["verdicts.md"])
def test_no_number_typed_into_a_results_section(page):
    results = results_section(page)
    assert "(results" in results, "the results section links the results pages"
    assert not typed_numbers(results), (
        f"docs/{page}: numbers typed by hand in its Results section (ours come from the "
        f"pipeline: link docs/results.md and metrics/<task>.md): {typed_numbers(results)}")


def test_the_rule_finds_a_typed_number_and_only_that():
    allowed = "\n".join([
        "See [the expr section](results.md#expr) and `metrics/expr.md`, seeds `0, 1, 2`.",
        "### What the source reports", "GPT-4o: 55.68 % of 10,000 problems.",
        "### Findings", FINDINGS, "|---|---|", "| the task is learned | ≥ 10 % test accuracy |",
        ""])
    assert typed_numbers(allowed) == []
    for typed in ("The LSTM reached 35.6 %.",               # prose
                  "[56.7 %](results.md#expr)",              # a link's text
                  "| GPT | 12.7 % |",                        # a table of our own
                  "### Our runs\nGPT 12.7 %"):              # after the source's subsection
        assert typed_numbers(allowed + "\n" + typed) == [typed.splitlines()[-1]], typed
    row = "| GPT reached 12.7 % | ≥ 10 % |"                  # a number in a finding's name
    assert typed_numbers(f"{FINDINGS}\n|---|---|\n{row}") == [row]
    with pytest.raises(AssertionError, match="a finding and a test only"):
        typed_numbers(f"{FINDINGS}\n|---|---|\n| learned | ≥ 10 % | 12.7 % |")
    with pytest.raises(AssertionError, match="one '## Results' section"):
        section("# page\n\n## Results: ours\n\n12.7 %\n", "Results")


def pages() -> list[Path]:
    return sorted(p for p in DOCS.glob("*.md") if p.name not in GENERATED)


@pytest.mark.parametrize("page", [p.name for p in pages()])
def test_each_page_opens_with_what_it_is_for(page):
    """A title, then a paragraph (not a heading, table, list or code) right under it."""
    lines = (DOCS / page).read_text().splitlines()
    assert lines[0].startswith("# ") and lines[1] == "", "a title, then a blank line"
    assert lines[2].strip() and not lines[2].startswith(("#", "|", "-", "```", "*")), \
        f"docs/{page}: say under the title who reads the page and for what"


@pytest.mark.parametrize("phrase", ["first tried", "earlier recipe", "no longer", "used to"])
def test_no_lab_history_in_the_docs(phrase):
    """How things came to be goes to CHANGELOG.md; the docs say what is."""
    found = [f"{p.relative_to(ROOT)}:{n}" for p in [*pages(), ROOT / "README.md"]
             for n, line in enumerate(p.read_text().splitlines(), 1) if phrase in line.lower()]
    assert not found, f"'{phrase}' (history: CHANGELOG.md) in {found}"


# A measured time is quoted on its own page, with its command and commit; the others link there,
# so two pages cannot give two numbers for one thing. benchmarks.md is the measurements' log and
# CHANGELOG.md the history, so neither is read here.
QUOTED = {
    "the smoke pipeline's wall time": (
        r"smoke (?:pipeline|profile)\b[^.|]{0,160}?\*{0,2}\b\d+(?:\.\d+)? s\b", "development.md"),
    "CI's wall time": (r"\.ci/run`[^|]{0,200}?\b\d+ min \d+ s\b", "development.md"),
    "the cpu profile's wall time": (r"`make repro`[^.|]{0,120}?\b\d+ min\b", "profiles.md"),
    "the paper profile's projected total": (
        r"estimate --profile paper`[^.|]{0,80}?\b\d+(?:\.\d+)? h (?:of training )?on (?:one|an) "
        r"H[12]00", "profiles.md"),
}


def quotes(text: str, pattern: str) -> list[str]:
    """The places `pattern` matches, a paragraph's lines read as one."""
    return [m.group(0) for m in re.finditer(pattern, re.sub(r"(?<!\n)\n(?!\n)", " ", text))]


@pytest.mark.parametrize("fact", sorted(QUOTED))
def test_a_measured_time_is_quoted_on_its_own_page_only(fact):
    pattern, home = QUOTED[fact]
    pages = [ROOT / "README.md", *(p for p in DOCS.glob("*.md")
                                   if p.name not in GENERATED | {"benchmarks.md", home})]
    found = {p.name: quotes(p.read_text(), pattern) for p in pages}
    assert not {k: v for k, v in found.items() if v}, f"{fact}: quoted outside docs/{home}"


def test_the_quote_rule_finds_a_second_quote():
    text = "The smoke pipeline's 49 stages\nran in 117 s with workers.\n\nOther `make repro` took 61 min."
    assert quotes(text, QUOTED["the smoke pipeline's wall time"][0])
    assert quotes(text, QUOTED["the cpu profile's wall time"][0])
    assert not quotes("The smoke pipeline is fast.\n\nIt ran in 117 s.",
                      QUOTED["the smoke pipeline's wall time"][0])


def pipeline_outputs() -> set[str]:
    """Every path dvc.yaml names as a stage's output."""
    import yaml
    stages = yaml.safe_load((ROOT / "dvc.yaml").read_text())["stages"]
    outs = set()
    for stage in stages.values():
        body = stage.get("do", stage)
        for out in body.get("outs", []):
            outs.add(next(iter(out)) if isinstance(out, dict) else out)
    return outs


def broken_links(page: Path, tracked: set[str], written: set[str]) -> list[str]:
    """The relative links of a page that lead nowhere in a fresh clone: to no tracked file or
    folder, or to a file the pipeline writes without the words "the pipeline writes it" beside
    the link (so a reader who finds no file knows why)."""
    text = re.sub(r"(?<!\n)\n(?!\n)", " ", page.read_text())
    out = []
    for m in re.finditer(r"\]\(([^)\s]+)\)", text):
        target = m.group(1).split("#", 1)[0]
        if not target or re.match(r"[a-z]+:", target):
            continue
        path = (page.parent / target).resolve().relative_to(ROOT).as_posix()
        if path in tracked or any(t.startswith(path + "/") for t in tracked):
            continue
        beside = text[m.end():m.end() + 80].split("](", 1)[0]   # up to the next link
        if path in written and "the pipeline writes it" in beside:
            continue
        out.append(f"{page.relative_to(ROOT)}: ({m.group(1)})")
    return out


def test_every_relative_link_resolves_in_a_fresh_clone():
    import subprocess
    tracked = set(subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True,
                                 check=True).stdout.split())
    written = pipeline_outputs()
    bad = [b for p in [ROOT / "README.md", *DOCS.glob("*.md")]
           for b in broken_links(p, tracked, written)]
    assert not bad, bad


def test_the_link_rule_finds_a_dead_link_and_an_unexplained_output(monkeypatch):
    page = DOCS / "x.md"
    monkeypatch.setattr(Path, "read_text", lambda self, *a, **k:
                        "[a](abacus.md) [b](gone.md) [c](../metrics/expr.md) [d](https://x.org)\n"
                        "[e](../metrics/looped.md) (the pipeline writes it)")
    found = broken_links(page, {"docs/abacus.md"}, {"metrics/expr.md", "metrics/looped.md"})
    assert found == ["docs/x.md: (gone.md)", "docs/x.md: (../metrics/expr.md)"]


def named_commands(text: str, tool: str) -> set[str]:
    """The subcommands of `tool` that a page's code spans and code blocks run."""
    code = " ".join(re.findall(r"```.*?```|`[^`\n]+`", text, flags=re.S))
    return set(re.findall(rf"(?<![\w/.-]){tool} ([a-z][a-z-]*)", code))


def test_every_command_the_docs_name_exists():
    """`arithrepro <command>` and `make <target>` in README and docs: each one the CLI or the
    Makefile has."""
    from arithrepro.cli import COMMANDS
    makefile = (ROOT / "Makefile").read_text()
    targets = set(re.findall(r"^([a-z][a-z-]*):", makefile, flags=re.M))
    pages = [ROOT / "README.md", *DOCS.glob("*.md")]
    missing = {f"{p.relative_to(ROOT)}: {tool} {name}"
               for p in pages for tool, known in (("arithrepro", COMMANDS), ("make", targets))
               for name in named_commands(p.read_text(), tool) - set(known)}
    assert not missing, sorted(missing)


def test_the_command_rule_reads_code_only():
    text = "Run `arithrepro repro` or\n```bash\narithrepro gone --x\nmake test\n```\narithrepro prose"
    assert named_commands(text, "arithrepro") == {"repro", "gone"}
    assert named_commands(text, "make") == {"test"}

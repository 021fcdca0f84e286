"""The results pages, in three layers: docs/results.md, the summary a reader finishes (what was
found in a few sentences, one table of the tested claims, the counts per source);
docs/results/<task>.md, one page per source (the run sets once, the headline metrics and every
seed, every claim of the ledger with its measurement in short, the figures); and
docs/results/<task>-findings.md, each finding's test and whole measurement once, which the
source page's rows link. All are rendered from docs/results.json (report/results.py: collect);
the words of a verdict are defined in docs/verdicts.md."""

from __future__ import annotations

from pathlib import Path

from arithrepro.report.results import (CLAIMS_END, CLAIMS_START, costs, readme_block,
                                       seeds_table, where, with_block)
from arithrepro.report.tables import format_mean

SHORT = 50     # characters: the longest measurement a cell holds before it points to its detail
CLAIM = 60     # characters: the longest claim the summary's table holds
BRIEF = 40     # characters: a number in the summary's table, a rule or stand-in on a row
ROW_CLAIM = 100  # characters: a claim on its source page's row (its section and ledger: whole)
WHERE = 50     # characters: where in the source, on a claim's row (its ledger entry: whole)
NAMED = 4      # the not-reproduced claims the summary's sentences name
FOLDED = 60    # characters: a measurement beside an untested claim or a setting


def pages(data: dict, figures: dict) -> dict[str, str]:
    """{path under docs/: text}: the summary and one page per task; `figures`: {task: [the
    copies' names under docs/results/]}."""
    out = {"results.md": summary(data)}
    for task, t in data["tasks"].items():
        out[f"results/{task}.md"] = detail(data, task, t, figures.get(task, []))
        out[f"results/{task}-findings.md"] = findings_page(task, t.get("findings", []),
                                                           data["profile"], _own_sections(t),
                                                           seeds_table(t))
    return out


def _own_sections(t: dict) -> list[dict]:
    """The tested claims whose measurement is not a finding's section already (measured against
    the source's own numbers, or a finding as another run set than the page's profile measured
    it): each a section of its own on the findings page, its cells whole there."""
    measured = {f["id"]: f["measured"] for f in t.get("findings", [])}
    return [r for r in _ledger(t) if _tested(r) and not _as_finding(r, measured)]


def _as_finding(r: dict, measured: dict) -> str | None:
    """The finding whose section on the findings page holds the row's measurement, if one does."""
    why = r.get("why") or ""
    fid = why.split()[1] if why.startswith("finding ") else None
    return fid if fid and measured.get(fid) == r.get("ours") else None


# --- the summary -------------------------------------------------------------------------------

def summary(data: dict) -> str:
    lines = ["# Results", "",
             "Written by the pipeline's `results` stage from the run records; edit nothing here. "
             "How a verdict is reached, and what each word means: [verdicts.md](verdicts.md). "
             "Each source's page, one click from its rows, holds the run sets, every seed and "
             "the claims not tested here; its findings page each test's whole measurement.", "",
             f"From {where(data)}. {costs(data)}", ""]
    found = found_sentences(data, "results/")
    if found:
        lines += ["## What was found", "", " ".join(found), ""]
    tested = [(task, r) for task, t in data["tasks"].items() for r in _ledger(t)
              if _tested(r) and r.get("class") != _consistency()]
    if tested:
        lines += ["## The tested claims", "",
                  "| claim | source | the source's number | ours | verdict | judged | detail |",
                  "|---|---|---|---|---|---|---|"]
        lines += [f"| {cell(short(r['claim'], CLAIM))} | {task} | "
                  f"{cell(short(r['source'], BRIEF))} | {cell(short(_ours(r), BRIEF))} | "
                  f"{_word(r)} | {_class_short(r)} | "
                  f"[{r['id']}](results/{task}.md#{r['id']}) |" for task, r in tested]
        lines.append("")
    checks = [(task, r) for task, t in data["tasks"].items() for r in _ledger(t)
              if _tested(r) and r.get("class") == _consistency()]
    if checks:
        lines += ["## Consistency checks", "",
                  "Claims that hold by construction (a parameter count, a deterministic cell) or "
                  "that any working run passes: they check the build, and count as no "
                  "reproduction.", "",
                  "| claim | source | verdict | detail |", "|---|---|---|---|"]
        lines += [f"| {cell(short(r['claim'], CLAIM))} | {task} | {_word(r)} | "
                  f"[{r['id']}](results/{task}.md#{r['id']}) |" for task, r in checks]
        lines.append("")
    counted = by_source(data, "results/")
    if counted:
        lines += ["## By source", "", *counted]
    return "\n".join(lines)


def by_source(data: dict, prefix: str) -> list[str]:
    """Each source's claims counted by verdict, linking its page (`prefix`: the pages' folder
    as the linking file sees it)."""
    from arithrepro.claims import SOURCE, STAND_IN, counts, total
    from arithrepro.findings.base import (CLOSE, DIFFERS, NOT_REPRODUCED, REPRODUCED, SMALL,
                                          UNTESTED)

    rows = []
    for task, t in data["tasks"].items():
        if "ledger" not in t:
            continue
        c = counts(t["ledger"]["claims"])
        split = lambda o: f"{c[o].get(SOURCE, 0)} / {c[o].get(STAND_IN, 0)}"  # noqa: E731
        rows.append(f"| [{task}]({prefix}{task}.md): {t['ledger']['source']['title']} | "
                    f"{split(REPRODUCED)} | {split(NOT_REPRODUCED)} | {split(CLOSE)} | "
                    f"{split(DIFFERS)} | {total(c, SMALL)} | {total(c, 'consistency')} | "
                    f"{total(c, UNTESTED)} | {c['settings']} |")
    if not rows:
        return []
    return ["| source | reproduced (source's setting / stand-in) | not reproduced | too close "
            "to call | differs between machines | n too small | consistency checks | not tested "
            "here | settings |", "|---|---:|---:|---:|---:|---:|---:|---:|---:|", *rows, ""]


def found_sentences(data: dict, prefix: str) -> list[str]:
    """What held and what did not, in four or five sentences, from the verdicts alone."""
    from arithrepro.claims import REASONS, SOURCE, STAND_IN
    from arithrepro.findings.base import (CLOSE, DIFFERS, NOT_REPRODUCED, REPRODUCED, SMALL,
                                          UNTESTED)

    rows = [(task, r) for task, t in data["tasks"].items() for r in _ledger(t)]
    if not rows:
        return []
    tested = [(task, r) for task, r in rows if _tested(r) and r.get("class") != _consistency()]
    n = lambda o, cls=None: sum(r["outcome"] == o and (cls is None or r.get("class") == cls)  # noqa: E731
                                for _, r in tested)
    said = [f"Of the {_count(len(tested), 'claim')} a run here tested as a reproduction, "
            f"{n(REPRODUCED)} reproduced ({n(REPRODUCED, SOURCE)} at the source's setting, "
            f"{n(REPRODUCED, STAND_IN)} on a smaller stand-in), {n(NOT_REPRODUCED)} did not "
            f"({n(NOT_REPRODUCED, SOURCE)} at the source's setting), {n(CLOSE)} are too close "
            f"to call, {n(SMALL)} rest on too few seeds to decide"
            + (f" and {n(DIFFERS)} differ between machines" if n(DIFFERS) else "") + "."]
    held = {task: (sum(r["outcome"] == REPRODUCED for t2, r in tested if t2 == task),
                   sum(t2 == task for t2, _ in tested)) for task in data["tasks"]}
    said.append("By source, reproduced of tested: " + ", ".join(
        f"[{task}]({prefix}{task}.md) {h} of {k}" for task, (h, k) in held.items() if k) + ".")
    failed = [(task, r) for task, r in tested if r["outcome"] == NOT_REPRODUCED]
    if failed:   # the first few named, the source's setting first
        failed.sort(key=lambda tr: tr[1].get("class") != SOURCE)
        names = list(dict.fromkeys(f"{task}: {_gist(data, task, r)} ({_class_short(r)})"
                                   for task, r in failed))
        more = len(names) - NAMED
        said.append(f"Not reproduced: {'; '.join(names[:NAMED])}"
                    + (f"; and {more} more" if more > 0 else "") + ".")
    checks = [r for _, r in rows if _tested(r) and r.get("class") == _consistency()]
    if checks:
        bad = sum(r["outcome"] != REPRODUCED for r in checks)
        if len(checks) == 1:
            said.append("The one consistency check of the build "
                        + ("holds." if not bad else "does not hold."))
        else:
            said.append(f"Of the {len(checks)} consistency checks of the build, "
                        + ("all hold." if not bad
                           else f"{bad} {'does' if bad == 1 else 'do'} not hold."))
    untested = [r for _, r in rows if r["outcome"] == UNTESTED]
    if untested:
        by = {reason: sum(r.get("reason") == reason for r in untested) for reason in REASONS}
        said.append(f"{_count(len(untested), 'claim')} "
                    f"{'is' if len(untested) == 1 else 'are'} not tested here: " + ", ".join(
            f"{k} {REASONS[reason].replace('needs', 'need') if k != 1 else REASONS[reason]}"
            for reason, k in by.items() if k) + ".")
    return said


# --- the README's first screen ---------------------------------------------------------------

def claims_block(data: dict) -> str:
    """The README's first-screen count of the sources' claims by verdict and class, per source."""
    lines = [CLAIMS_START, ""]
    every = data.get("claims")
    if every and _before_classes(data):
        lines += _counted_before_classes(data)
    elif every:
        lines += [" ".join(found_sentences(data, "docs/results/")), "",
                  f"Each claim judged over seeds no recipe was tuned on, by a stated test "
                  f"([docs/verdicts.md](docs/verdicts.md)); at the source's setting a run used "
                  f"the source's data, model and budget, on a stand-in a smaller setting named on "
                  f"its row ([docs/results.md](docs/results.md), the ledger: [claims/](claims)). "
                  f"In all: **{counts_words(every)}**; {every.get('settings', 0)} more are "
                  "settings the project follows or departs from, each named.", "",
                  *by_source(data, "docs/results/"), f"From {where(data)}."]
    else:
        lines.append("No ledger judged yet: `make repro` writes it.")
    return "\n".join([*lines, "", CLAIMS_END])


def _before_classes(data: dict) -> bool:
    """A results.json written before verdicts had classes (its counts a number per outcome)."""
    return any(isinstance(v, int) for k, v in data["claims"].items() if k != "settings")


def _counted_before_classes(data: dict) -> list[str]:
    """The README's count from a results.json written before verdict classes: its own counts,
    said to be that, until `make repro` judges the claims again."""
    c = data["claims"]
    words = ", ".join(f"{c.get(o, 0)} {o}" for o in
                      ("reproduced", "not reproduced", "too close to call", "not tested here"))
    commits = ", ".join(str(x)[:7] for x in data["origin"]["commit"])
    lines = [f"The sources' claims as the runs of commit {commits} were judged, before verdicts "
             "had classes (at the source's setting, on a stand-in, consistency checks) and the "
             f"rules of [docs/verdicts.md](docs/verdicts.md): **{words}**; {c.get('settings', 0)} "
             "more are settings the project follows or departs from, each named "
             "([claims/](claims), [docs/results.md](docs/results.md)). `make repro` judges them "
             "again by those rules.", "",
             "| source | reproduced | not reproduced | too close to call | not tested here |",
             "|---|---:|---:|---:|---:|"]
    for task, t in data["tasks"].items():
        if "ledger" in t:
            outcomes = [r["outcome"] for r in t["ledger"]["claims"]]
            lines.append(f"| [{task}](docs/results/{task}.md): {t['ledger']['source']['title']} | "
                         + " | ".join(str(outcomes.count(o)) for o in
                                      ("reproduced", "not reproduced", "too close to call",
                                       "not tested here")) + " |")
    return [*lines, "", f"From {where(data)}."]


def counts_words(c: dict) -> str:
    """'12 reproduced (4 at the source's setting, 8 on a stand-in), 3 not reproduced (…), …, 6
    consistency checks (all hold), 40 not tested here (24 need the paper profile, …)'."""
    from arithrepro.claims import CONSISTENCY, REASONS, SOURCE, STAND_IN, total
    from arithrepro.findings.base import OUTCOMES, REPRODUCED, UNTESTED

    said = []
    for o in OUTCOMES:
        n = total(c, o)
        if o == UNTESTED:
            parts = [f"{k} {REASONS[r].replace('needs', 'need') if k != 1 else REASONS[r]}"
                     for r in REASONS if (k := c.get(o, {}).get(r, 0))]
        else:
            parts = [f"{k} {cls}" for cls in (SOURCE, STAND_IN) if (k := c.get(o, {}).get(cls, 0))]
        said.append(f"{n} {o}" + (f" ({', '.join(parts)})" if n and parts else ""))
    held = c.get("consistency", {})
    n = sum(held.values())
    fails = n - held.get(REPRODUCED, 0)
    said.insert(-1, f"{n} {CONSISTENCY}{'s' * (n != 1)}" + (
        "" if not n else " (all hold)" if not fails else f" ({fails} not holding)"))
    return ", ".join(said)



# --- a source's page ---------------------------------------------------------------------------

def detail(data: dict, task: str, t: dict, figures: list[str]) -> str:
    title = (t.get("ledger") or {}).get("source", {}).get("title", "")
    lines = [f"# Results: {task}", "",
             (f"{title}. " if title else "") + "Written by the pipeline's `results` stage; edit "
             f"nothing here. [All sources](../results.md) · [the experiment](../{task}.md) · "
             + f"[the findings' tests and every seed]({task}-findings.md) · "
             + f"[what a verdict means](../verdicts.md) · [the ledger](../../claims/{task}.yaml)",
             ""]
    lines += run_sets(t)
    lines += ["## Headline metrics", "",
              "Mean ± sample standard deviation (n − 1) over each configuration's n seeds; one "
              "seed shows its value alone.", ""]
    header = ["model", "size", "n", *t["metrics"]]
    lines += ["| " + " | ".join(header) + " |",
              "|" + "|".join(["---", "---"] + ["---:"] * (len(header) - 2)) + "|"]
    for c in t["cells"]:
        lines.append("| " + " | ".join([c["model"], c["size"], str(c["n"]), *(
            format_mean(m, c[m]["mean"], c[m]["std"]) if c.get(m) else "–"
            for m in t["metrics"])]) + " |")
    lines += ["", f"Every seed's values: [the findings page]({task}-findings.md#every-seed).", ""]
    lines += ledger_section(task, t.get("ledger"), t.get("findings", []))
    if figures:
        lines += ["## Figures", ""]
        lines += [f"![{task}: {Path(name).stem}]({name})\n" for name in figures]
    return "\n".join(lines)


def run_sets(t: dict) -> list[str]:
    """Every run set that judged a claim of this source, once: where it ran, and whether its
    code is the page's."""
    seen = {}
    for r in _ledger(t):
        for j in r.get("judged") or []:
            key = _set_name(j)
            seen.setdefault(key, (j.get("where") or "–", j.get("other_code") or "the page's"))
    if not seen:
        return []
    return ["## Run sets", "",
            "The runs this page's verdicts rest on; each row below names the run sets that "
            "judged it, the one that decides in bold (\"agrees\": another gave its verdict). "
            "Watched seeds, which a recipe was chosen "
            "on, decide nothing: their verdict stands beside.", "",
            "| run set | where it ran | its code |", "|---|---|---|",
            *(f"| {name} | {cell(w)} | {cell(code)} |" for name, (w, code) in seen.items()), ""]


def findings_page(task: str, findings: list[dict], profile: str,
                  rows: list[dict] = (), seeds: list[str] = ()) -> str:
    """Each finding's claim, test and what the page's profile measured, once, a section each
    with its measurement a line per part; then the claims measured against the source's own
    numbers (`rows`), each whole; the source page's rows link here."""
    from arithrepro.findings.base import verdict_word

    lines = [f"# Findings: {task}", "",
             "Written by the pipeline's `results` stage; edit nothing here. "
             f"[The source's page]({task}.md) · [what a verdict means](../verdicts.md)", "",
             f"Each finding's stated test and what the {profile} profile's runs measured; the "
             f"claims on [the source's page]({task}.md) that a finding decides link here.", ""]
    for f in findings:
        parts, after = measured_parts(f["measured"])
        lines += [f"## <a id=\"{f['id']}\"></a>{f['id']}: {verdict_word(f)}", "",
                  f"{f['claim'][:1].upper()}{f['claim'][1:].rstrip('.')}. "
                  f"Test: {(f.get('test') or '–').rstrip('.')}.", "",
                  *(f"- {p}" for p in parts), *(["", after] if after else []), ""]
    if rows:
        lines += ["## Claims measured on their deciding run set", "",
                  "Each claim's measurement whole, as the run set that decides it measured it "
                  "(against the source's own numbers, or a finding on another run set than the "
                  f"{profile} profile); its verdict and rule are on "
                  f"[the source's page]({task}.md).",
                  ""]
    for r in rows:
        parts, after = measured_parts(r.get("ours") or "–")
        lines += [f"### <a id=\"{r['id']}\"></a>{r['id']}: {verdict_word(r)}", "",
                  f"{cell(r['claim'])} The source: {cell(r.get('source') or '–')}.", "",
                  f"Verdict: {cell(verdict_cell(r, None, task + '-findings.md'))}.", "",
                  *(f"- {p}" for p in parts), *(["", after] if after else []), ""]
    if seeds:
        lines += ["## <a id=\"every-seed\"></a>Every seed", "", *seeds]
    return "\n".join(lines)


def measured_parts(text: str) -> tuple[list[str], str]:
    """A measurement's parts (its "; "-separated clauses outside brackets), and what follows
    them: the multiplicity correction over the parts and the seeds it would take to decide."""
    after = []
    for mark in (". To decide", " (Holm's correction"):
        at = _outside(text, mark)
        if at >= 0:
            after.insert(0, text[at:].lstrip(". ").strip())
            text = text[:at]
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        depth += (ch in "([") - (ch in ")]")
        if depth == 0 and text.startswith("; ", i):
            parts.append(text[start:i])
            start = i + 2
    parts.append(text[start:])
    after = [a[1:-1] if a.startswith("(") and a.endswith(")") else a for a in after]
    return parts, ". ".join(after) + ("." if after else "")


def _outside(text: str, mark: str) -> int:
    """Where `mark` first stands outside any brackets in `text`, or -1."""
    depth = 0
    for i, ch in enumerate(text):
        if depth == 0 and text.startswith(mark, i):
            return i
        depth += (ch in "([") - (ch in ")]")
    return -1


def ledger_section(task: str, ledger: dict | None, findings: list[dict]) -> list[str]:
    """The source's claims: the tested ones with the source's number, ours, the verdict, its
    class and rule, and the run sets that judged it; the untested folded by reason; the
    settings folded."""
    from arithrepro.claims import REASONS, counts
    from arithrepro.findings.base import UNTESTED

    if not ledger:
        return []
    src, rows = ledger["source"], ledger["claims"]
    measured = {f["id"]: f["measured"] for f in findings}
    tests = f"{task}-findings.md"
    lines = ["## The source's claims", "",
             f"Source {src['file']}: {src['carries']} Of its "
             f"{sum(r['outcome'] is not None for r in rows)} claims: "
             f"{counts_words(counts(rows))}.", ""]
    if src.get("watched"):
        w = src["watched"]
        lines += [f"Seeds {', '.join(map(str, w['seeds']))} are watched: {w['why']}", ""]
    judged = [r for r in rows if _tested(r)]
    if judged:
        notes = shared_notes(task, judged, "stand-in")
        checks = shared_notes(task, judged, "check")
        lines += ["| claim | in the source (linking its ledger entry) | the source's number | ours "
                  "| verdict | run sets |",
                  "|---|---|---|---|---|---|"]
        lines += [f"| <a id=\"{r['id']}\"></a>{cell(short(r['claim'], ROW_CLAIM))} | "
                  f"{_entry(task, r)} | {cell(short(r['source'], BRIEF))} | "
                  f"{cell(_ours(r, measured, tests))} | "
                  f"{cell(verdict_cell(r, notes | checks, tests, not _as_finding(r, measured)))} | "
                  f"{cell(runs_cell(r))} |"
                  for r in judged]
        if notes:
            lines += ["", "Stand-ins shared by several rows, each how the runs differ from the "
                      "source's setting:", "",
                      *(f"- <a id=\"{anchor}\"></a>{label}: {cell(text)}"
                        for text, (label, anchor) in notes.items())]
        if checks:
            lines += ["", "Why several rows are consistency checks, and count as no reproduction:",
                      "", *(f"- <a id=\"{anchor}\"></a>{label}: {cell(text)}"
                            for text, (label, anchor) in checks.items())]
    # the rows nothing here tested, a line each: the claim's id linking its ledger entry, which
    # holds the claim, where the source says it, its number, and why it is untested
    for reason, words in REASONS.items():
        left = [r for r in rows if r["outcome"] == UNTESTED and r.get("reason") == reason]
        if left:
            lines += ["", f"<details><summary>Not tested here, {words} ({len(left)})</summary>",
                      "", ", ".join(_folded(task, r) for r in left), "", "</details>"]
    settings = [r for r in rows if r["outcome"] is None]
    if settings:
        lines += ["", f"<details><summary>The source's settings ({len(settings)}), each followed "
                  "or departed from as its ledger entry says</summary>", "",
                  ", ".join(_folded(task, r) for r in settings), "", "</details>"]
    return [*lines, ""]


def _decider(r: dict) -> dict | None:
    """The judgement of the run set that decides a claim's verdict."""
    return next((j for j in r.get("judged") or [] if j["set"] == r.get("via")
                 and not j.get("watched") and not j.get("setting")), None)


def shared_notes(task: str, rows: list[dict], kind: str) -> dict[str, tuple[str, str]]:
    """{sentence: (its label, its anchor)} for the stand-in sentences (`kind` "stand-in") or the
    reasons a row is a consistency check ("check") that decide more than one of `rows`: written
    once under the table, the rows pointing to it."""
    from collections import Counter

    from arithrepro.claims import CONSISTENCY, STAND_IN

    cls, key = {"stand-in": (STAND_IN, "stand_in"), "check": (CONSISTENCY, "consistency")}[kind]
    used = Counter(d[key] for r in rows if r.get("class") == cls
                   for d in [_decider(r)] if d and d.get(key))
    shared = [text for text, n in used.items() if n > 1]
    return {text: (f"{kind} {chr(ord('a') + i)}", f"{task}-{kind}-{chr(ord('a') + i)}")
            for i, text in enumerate(shared)}


def verdict_cell(r: dict, notes: dict | None = None, tests: str = "",
                 in_short: bool = False) -> str:
    """A tested claim's verdict as its row reads: the word, its class, the stand-in's difference
    (or a link to it, where `notes` holds it) or why it is a consistency check, and the rule it
    was decided by (a finding: a link to it on the page `tests`). `in_short`: the row's section
    on `tests` holds it whole, so the difference and the rule are cut short here."""
    from arithrepro.claims import CONSISTENCY, STAND_IN
    from arithrepro.findings.base import verdict_word

    word = verdict_word(r)
    if r.get("class"):
        word += f", {r['class']}"
    decider = _decider(r)
    key = {STAND_IN: "stand_in", CONSISTENCY: "consistency"}.get(r.get("class"))
    if decider and key and decider[key] in (notes or {}):
        label, anchor = notes[decider[key]]
        word += f" ([{label}](#{anchor}))"
    elif decider and key:
        word += f" ({short(decider[key], BRIEF) if in_short else decider[key]})"
    why = r.get("why") or ""
    if why.startswith("finding "):
        name = why.split()[1]
        why = f"finding [{name}]({tests}#{name})"
    elif in_short and len(" ".join(why.split())) > BRIEF:
        why = f"{short(why, BRIEF)} ([rule]({tests}#{r['id']}))"
    return word + (f": {why}" if why else "")


def runs_cell(r: dict) -> str:
    """Which run sets judged the claim (their provenance: the page's run-set table), the deciding
    one first and in bold, the others' verdicts beside ("agrees" where they give the deciding
    verdict), each verdict once with the sets that gave it."""
    from arithrepro.findings.base import verdict_word

    def decides(j: dict) -> bool:
        return j["set"] == r.get("via") and not j.get("watched") and not j.get("setting")

    judged = r.get("judged") or []
    first = next((j for j in judged if decides(j)), None)
    decider = _set_name(first, watched=False) if first else None
    if decider and len(judged) == 1:   # alone, it decides: its name says it
        return decider
    ruling = verdict_word(first) if first else None
    others: dict[str, list[str]] = {}   # verdict -> the other sets that gave it, in order
    watched = []
    for j in judged:   # its code and where it ran: the page's run-set table
        name = _set_name(j, watched=False)
        if j.get("watched"):   # the deciding set's own watched seeds need not name it again
            watched.append(f"{'' if name == decider else name + ', '}watched seeds: "
                           f"{verdict_word(j)}")
        elif not decides(j):
            others.setdefault(verdict_word(j), []).append(name)
    # a set that gives the deciding set's verdict says only that it agrees
    said = [f"{', '.join(names)}: "
            + (word if word != ruling else "agrees" if len(names) == 1 else "agree")
            for word, names in others.items()]
    return "; ".join([*([f"**{decider}**"] if decider else []), *said, *watched]) or "–"


# --- pieces ------------------------------------------------------------------------------------

def _count(n: int, noun: str) -> str:
    return f"{n} {noun}{'s' * (n != 1)}"


def _entry(task: str, r: dict) -> str:
    """Where the source says it, linking the claim's entry in the ledger."""
    line = f"#L{r['line']}" if r.get("line") else ""
    # in short: the ledger entry it links holds it whole; "cell [12]" stays text
    text = cell(short(r["where"], WHERE)).replace("[", "\\[").replace("]", "\\]")
    return f"[{text}](../../claims/{task}.yaml{line})"


def _folded(task: str, r: dict) -> str:
    """An untested claim or a setting, in a list: its id, linked to its ledger entry (which holds
    the claim, where the source says it, its number and why it is untested), and the run sets
    that judged it beside, each with its verdict and its measurement in short."""
    from arithrepro.findings.base import verdict_word

    line = f"#L{r['line']}" if r.get("line") else ""
    beside = "; ".join(f"{_set_name(j)}: {verdict_word(j)}"
                       + (f", {short(j['ours'], FOLDED)}" if j.get("ours") else "")
                       for j in r.get("judged") or [])
    beside = f" (beside: {cell(beside)})" if beside else ""
    return f"<a id=\"{r['id']}\"></a>[{r['id']}](../../claims/{task}.yaml{line}){beside}"


def _gist(data: dict, task: str, r: dict) -> str:
    """A claim in a few plain words: the claim of the finding that decides it, where one does
    (several of a source's claims can share it), else the claim itself cut short."""
    why = r.get("why") or ""
    if why.startswith("finding "):
        fid = why.split()[1].rstrip(":,;")
        for f in data["tasks"][task].get("findings", []):
            if f["id"] == fid:
                return f["claim"]
    return short(r["claim"], 90)


def _ledger(t: dict) -> list[dict]:
    return (t.get("ledger") or {}).get("claims", [])


def _tested(r: dict) -> bool:
    from arithrepro.findings.base import UNTESTED

    return r["outcome"] not in (None, UNTESTED)


def _consistency() -> str:
    from arithrepro.claims import CONSISTENCY

    return CONSISTENCY


def _set_name(j: dict, watched: bool = True) -> str:
    return (j["set"] + (f" @ {j['setting']}" if j.get("setting") else "")
            + (" (watched seeds)" if watched and j.get("watched") else ""))


def _ours(r: dict, measured: dict | None = None, tests: str = "") -> str:
    """What the runs measured; a finding's measurement, written whole once on the findings page
    `tests`, in short here and linked to it where it is the one shown there."""
    ours = r.get("ours") or "–"
    fid = _as_finding(r, measured) if measured is not None else None
    if fid:
        return f"{short(ours)} ([all]({tests}#{fid}))"
    if tests and len(" ".join(ours.split())) > SHORT:
        return f"{short(ours)} ([all]({tests}#{r['id']}))"
    return ours


def _word(r: dict) -> str:
    from arithrepro.findings.base import verdict_word

    return verdict_word(r)


def _class_short(r: dict) -> str:
    from arithrepro.claims import SOURCE, STAND_IN

    return {SOURCE: "the source's setting", STAND_IN: "a stand-in"}.get(r.get("class"), "–")


def short(text: str, limit: int = SHORT) -> str:
    """`text` whole if it fits in `limit` characters, else cut at the last clause boundary
    before it, with an ellipsis."""
    text = " ".join(str(text).split())
    if len(text) <= limit:
        return text
    cut = text[:limit]
    at = max(cut.rfind(s) for s in ("; ", ", ", " ("))
    return (cut[:at] if at > limit // 2 else cut.rsplit(" ", 1)[0]) + " …"


def cell(text: str) -> str:
    return " ".join(str(text).split()).replace("|", "\\|")


def write_readme(path: Path, data: dict) -> None:
    """README.md's results and claims blocks rewritten from `data` (a published results.json)."""
    from arithrepro.io import write_text

    text = with_block(path.read_text(), readme_block(data))
    write_text(path, with_block(text, claims_block(data), CLAIMS_START, CLAIMS_END))

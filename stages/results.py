"""results: the results page (docs/results.md, docs/results.json, docs/results/*.png) from every
task's run records, and, with --readme, README.md's results block from docs/results.json."""

from __future__ import annotations

from pathlib import Path

import click

from arithrepro.stages.common import done, friendly_errors, params_option

DOCS = Path("docs")


@click.command("results")
@params_option
@click.option("--readme", is_flag=True,
              help="Only rewrite README.md's results and claims blocks from docs/results.json "
                   "(not a stage).")
@click.option("--from", "from_path", metavar="RESULTS_JSON",
              help="Only write docs/runsets/modular-source.json from the results.json of a workspace "
                   "that ran sanity=source (`make modular-source`; not a stage).")
@friendly_errors
def results(params_path: str, readme: bool, from_path: str | None) -> None:
    """Write the results page.

    Reads the record of every run the params ask for (params: each task's lists that name its
    runs, `profile` and `claims.targets`), their training provenance, and the figures each task
    shows first (report/figures.py: `shown`); checks each task's findings on the records
    (arithrepro/findings/) and judges every claim of the ledger, claims/<task>.yaml
    (arithrepro/claims.py), with docs/runsets/ for the claims only `make
    modular-source` tests. Writes docs/results.json, the summary docs/results.md, a page per
    source and small copies of those figures in docs/results/, git-tracked (DVC does not cache
    them). With --readme, reads
    docs/results.json and rewrites README.md's results block, nothing else.
    """
    from arithrepro.io import read_json, write_json, write_text
    from arithrepro.report.results import collect, readme_block, thumbnail, with_block

    if readme:
        from arithrepro.report.results import CLAIMS_END, CLAIMS_START
        from arithrepro.report.results_page import claims_block

        data = read_json(DOCS / "results.json", ("profile", "runs", "origin", "tasks"))
        text = with_block(Path("README.md").read_text(), readme_block(data))
        text = with_block(text, claims_block(data), CLAIMS_START, CLAIMS_END)
        write_text("README.md", text)
        done("results: README.md's results and claims blocks <- docs/results.json")
        return
    if from_path:
        from arithrepro.report.results import source_study

        write_json(DOCS / "runsets" / "modular-source.json",
                   source_study(read_json(from_path, ("profile", "origin", "tasks", "targets"))))
        done(f"results: {DOCS}/runsets/modular-source.json <- {from_path}")
        return
    import shutil

    from arithrepro import claims, config, runsets
    from arithrepro.findings.base import verdicts
    from arithrepro.findings.registry import FINDINGS
    from arithrepro.report.figures import FIGURES
    from arithrepro.report.tables import wanted_runs
    from arithrepro.tasks.registry import REPORTS, TASKS

    params = config.load(params_path)
    ledgers = {n: claims.load(n) for n in TASKS}   # checked before any work
    df = wanted_runs(params, list(TASKS))
    origins = {n: [(read_json(run.files.record).get("provenance") or {}).get("train", {})
                   for run in t.runs(params)] for n, t in TASKS.items()}
    estimate = runsets.estimate()
    names = [params["profile"], *params["claims"]["targets"]]
    findings, judged = {}, {}
    for n in TASKS:
        rows = df[df["task"] == n]
        judge = lambda some, n=n: verdicts(FINDINGS.get(n, ()), some, params)  # noqa: E731
        sets = runsets.own(n, rows, origins[n], params, ledgers[n], judge) \
            + runsets.carried(n, names, ledgers[n]) \
            + runsets.crosschecks(n, params["profile"], ledgers[n])
        findings[n] = sets[0].findings
        judged[n] = claims.ledger_rows(ledgers[n], claims.verdicts(ledgers[n], sets, estimate))
    targets = tuple(params["claims"]["targets"])
    data = collect(df, REPORTS, [o for n in TASKS for o in origins[n]],
                   params["profile"], findings, judged)
    data["targets"] = list(targets)
    shutil.rmtree(DOCS / "results", ignore_errors=True)   # figures of tasks no longer shown go
    figures = {}
    for name in TASKS:
        for src in FIGURES[name].shown if name in FIGURES else ():
            src = Path(src)
            if not src.is_file():
                raise FileNotFoundError(f"{src}: missing; run `dvc repro render-figures-{name}`")
            figures.setdefault(name, []).append(thumbnail(src, DOCS / "results" / f"{name}_{src.name}").name)
    from arithrepro.report.results_page import pages

    write_json(DOCS / "results.json", data)
    for name, text in pages(data, figures).items():
        write_text(DOCS / name, text)
    done(f"results: {data['runs']} runs -> {DOCS}/results.md, results.json, a page per source "
         f"and {sum(map(len, figures.values()))} figures in {DOCS}/results/")

"""results: the results pages (pages/results.md, pages/results.json, pages/results/: a page per
source and its figures) from every task's run records, a DVC output like any other; with
--publish, those pages copied to docs/ (git-tracked, what a clone and a web view show) and
README.md's blocks written from them, only from a complete run of a full profile."""

from __future__ import annotations

from pathlib import Path

import click

from arithrepro.stages.common import done, friendly_errors, params_option

DOCS = Path("docs")
PAGES = Path("pages")   # the stage's output; docs/ holds the published copy
PUBLISHED = ("results.md", "results.json", "results")


@click.command("results")
@params_option
@click.option("--publish", is_flag=True,
              help="Only copy pages/ to docs/ and rewrite README.md's blocks from them, where "
                   "they come from a full profile whose pipeline is up to date (not a stage).")
@click.option("--readme", is_flag=True,
              help="Only rewrite README.md's results and claims blocks and the published pages "
                   "from docs/results.json, as the page code now writes them (not a stage).")
@click.option("--rejudge", is_flag=True,
              help="Only judge the published page's claims again (docs/results.json): its own "
                   "runs' verdicts as published, the run-set files (docs/runsets/, "
                   "docs/crosscheck/) read anew; then as --readme (not a stage).")
@click.option("--modular-source", "source_path", metavar="FILE",
              help="Only write FILE (docs/runsets/modular-source.json) from this workspace's "
                   "records of the stages the modular-source target runs, under params composed "
                   "with sanity=source (`make modular-source`; not a stage).")
@click.option("--slice", "slice_path", metavar="FILE",
              help="Only write FILE (docs/runsets/paper-slice.json: a run set other pages read) "
                   "from this workspace's records of the --task tasks under the params' profile "
                   "(`make paper-slice`; not a stage). Its other tasks stay where it holds the "
                   "same profile.")
@click.option("--task", "tasks", multiple=True, metavar="TASK",
              help="With --slice: a task whose records it carries (repeatable).")
@friendly_errors
def results(params_path: str, publish: bool, readme: bool, rejudge: bool,
            source_path: str | None, slice_path: str | None, tasks: tuple) -> None:
    """Write the results page.

    Reads the record of every run the params ask for (params: each task's lists that name its
    runs, `profile` and `claims.targets`), their training provenance, and the figures each task
    shows first (report/figures.py: `shown`); checks each task's findings on the records
    (arithrepro/findings/) and judges every claim of the ledger, claims/<task>.yaml
    (arithrepro/claims.py), with docs/runsets/ for the claims only `make modular-source`
    tests and the paper profile's slice (`make paper-slice`). Writes pages/results.json, the
    summary pages/results.md, a page per source and small copies of those figures in
    pages/results/, a DVC output. With --publish,
    copies them to docs/ and rewrites README.md's results and claims blocks; with --readme,
    rewrites those blocks and the pages in docs/ from docs/results.json, nothing else; with
    --rejudge, first judges docs/results.json's claims again on the run-set files as they are
    now (a new `make modular-source` or crosscheck file, where this workspace does not hold the
    records of the page's own runs), the page's own runs' verdicts kept. Neither
    publishes a smoke profile's pages, nor (--publish) pages the pipeline's current state did
    not make.
    """
    from arithrepro.io import read_json, write_json, write_text
    from arithrepro.report.results import publishable, thumbnail

    if publish or readme or rejudge:
        from arithrepro.report.results import publish_pages
        from arithrepro.report.results_page import write_readme

        source = PAGES if publish else DOCS
        data = read_json(source / "results.json", ("profile", "runs", "origin", "tasks"))
        publishable(data, source / "results.json", changed_stages if publish else None)
        if publish:
            publish_pages(PAGES, DOCS, PUBLISHED)
        else:
            if rejudge:
                data = rejudged(data, source / "results.json")
                write_json(source / "results.json", data)
            render_published(data)
        write_readme(Path("README.md"), data)
        done(f"results: {'docs/ <- pages/, ' if publish else 'docs/ pages and '}README.md's "
             f"results and claims blocks <- {source}/results.json"
             + (", its claims judged again on the run-set files" if rejudge else ""))
        return
    if slice_path or tasks:
        from arithrepro import config, runsets
        from arithrepro.slices import merged, slice_study
        from arithrepro.tasks.registry import TASKS

        target = Path(slice_path or "").stem
        if target not in runsets.SLICES:
            raise click.UsageError(f"--slice {slice_path}: expected a file named one of "
                                   f"{', '.join(f'{t}.json' for t in runsets.SLICES)}")
        if not tasks or set(tasks) - set(TASKS):
            raise click.UsageError(f"--task {', '.join(tasks) or '(none)'}: expected some of "
                                   f"{', '.join(TASKS)}")
        params = config.load(params_path)
        out = Path(slice_path)
        old = runsets.slice_file(out)   # a broken file stops here, before the judging
        write_json(out, merged(old, slice_study(params, list(tasks), target)))
        done(f"results: {slice_path} <- the {params['profile']} profile's records of "
             f"{', '.join(tasks)}")
        return
    if source_path:
        from arithrepro import config, runsets
        from arithrepro.report.results import source_merged, source_study

        params = config.load(params_path)
        out = Path(source_path)
        old = read_json(out, ("origin", "claims")) if out.is_file() else None   # before judging
        write_json(out, source_merged(old, source_study(judge(params, ["modular"],
                                                              runsets.SOURCE_STAGES))))
        done(f"results: {source_path} <- the records of {', '.join(runsets.SOURCE_STAGES)}")
        return
    import shutil

    from arithrepro import config
    from arithrepro.report.figures import FIGURES
    from arithrepro.tasks.registry import TASKS

    params = config.load(params_path)
    data = judge(params, list(TASKS))
    shutil.rmtree(PAGES, ignore_errors=True)   # figures of tasks no longer shown go
    figures = {}
    for name in TASKS:
        for src in FIGURES[name].shown if name in FIGURES else ():
            src = Path(src)
            if not src.is_file():
                raise FileNotFoundError(f"{src}: missing; run `dvc repro render-figures-{name}`")
            figures.setdefault(name, []).append(thumbnail(src, PAGES / "results" / f"{name}_{src.name}").name)
    from arithrepro.report.results_page import pages

    write_json(PAGES / "results.json", data)
    for name, text in pages(data, figures).items():
        write_text(PAGES / name, text)
    done(f"results: {data['runs']} runs -> {PAGES}/results.md, results.json, a page per source "
         f"and {sum(map(len, figures.values()))} figures in {PAGES}/results/ "
         f"(`arithrepro results --publish` copies them to {DOCS}/)")


def judge(params: dict, tasks: list[str], stages: tuple[str, ...] = ()) -> dict:
    """results.json's data for `tasks`: the records of the runs the params ask for (those of
    `stages` alone, where given), each task's findings, and every claim of its ledger judged
    on the run sets a page reads (arithrepro/runsets.py)."""
    from arithrepro import claims, runsets
    from arithrepro.findings.base import verdicts
    from arithrepro.findings.registry import FINDINGS
    from arithrepro.report.results import collect, origin
    from arithrepro.report.tables import wanted_runs
    from arithrepro.tasks.registry import REPORTS

    ledgers = {n: claims.load(n) for n in tasks}   # checked before any work
    df = wanted_runs(params, tasks, stages)
    origins = {n: runsets.trained_where(n, params, stages) for n in tasks}
    estimate = runsets.estimate()
    names = [params["profile"], *params["claims"]["targets"]]
    findings, judged = {}, {}
    for n in tasks:
        rows = df[df["task"] == n]
        check = lambda some, n=n: verdicts(FINDINGS.get(n, ()), some, params)  # noqa: E731
        sets = runsets.own(n, rows, origins[n], params, ledgers[n], check) \
            + runsets.carried(n, names, ledgers[n]) \
            + runsets.crosschecks(n, params["profile"], ledgers[n], own=origin(origins[n]))
        findings[n] = sets[0].findings
        judged[n] = claims.ledger_rows(ledgers[n], claims.verdicts(ledgers[n], sets, estimate))
    data = collect(df, {n: REPORTS[n] for n in tasks}, [o for n in tasks for o in origins[n]],
                   params["profile"], findings, judged)
    data["targets"] = list(params["claims"]["targets"])
    return data


def rejudged(data: dict, path: Path) -> dict:
    """The published `data` with every claim judged again: the page's own run sets as it judged
    them (runsets.published), the files' run sets read now, other code named against the
    commit of the page's own runs. ArtifactError naming `path` where the page cannot be judged
    again: runs from several commits or from code other than HEAD's in their stages' files, or
    a ledger whose claims are not the page's."""
    from arithrepro import claims, runsets
    from arithrepro.io import ArtifactError

    commits = data["origin"].get("commit") or []
    if len(commits) != 1:
        raise ArtifactError(path, f"origin.commit: {commits}; judging again needs the page's runs "
                                  "from one commit (run `arithrepro repro` instead)")
    names = [data["profile"], *data.get("targets", [])]
    ledgers = {n: claims.load(n) for n in data["tasks"]}
    for n, ledger in ledgers.items():
        other = runsets.other_code(n, [{"commit": commits[0], "dirty": False}])
        if other:   # the results stage refuses such records; a page of them is no better
            raise ArtifactError(path, f"tasks.{n}: the page's runs are {other}; run "
                                      "`arithrepro repro`")
        rows = data["tasks"][n].get("ledger", {}).get("claims", [])
        gone = {r["id"] for r in rows} ^ {c["id"] for c in ledger["claims"]}
        if gone:
            raise ArtifactError(path, f"tasks.{n}: claims {', '.join(sorted(gone)[:3])} differ "
                                      "between the page and claims/; run `arithrepro repro`")
    estimate = runsets.estimate()
    for n, ledger in ledgers.items():
        sets = runsets.published(data["tasks"][n]["ledger"]["claims"]) \
            + runsets.carried(n, names, ledger, head=commits[0]) \
            + runsets.crosschecks(n, data["profile"], ledger, head=commits[0], own=data["origin"])
        data["tasks"][n]["ledger"] = claims.ledger_rows(ledger, claims.verdicts(ledger, sets,
                                                                                estimate))
    judged = [c for t in data["tasks"].values() for c in t.get("ledger", {}).get("claims", [])]
    return {**data, "claims": claims.counts(judged)}


def render_published(data: dict) -> None:
    """docs/results.md and docs/results/*.md written again from the published data, beside the
    published figures (a change of the page code shown without new runs)."""
    from arithrepro.io import write_text
    from arithrepro.report.figures import FIGURES
    from arithrepro.report.results_page import pages

    def shown_first(png: Path) -> tuple:   # in the order the stage shows them (FIGURES' `shown`)
        task = png.name.split("_")[0]
        order = [f"{task}_{Path(s).name}" for s in (FIGURES[task].shown if task in FIGURES else ())]
        return (task, order.index(png.name) if png.name in order else len(order), png.name)

    figures = {}
    for png in sorted((DOCS / "results").glob("*.png"), key=shown_first):
        figures.setdefault(png.name.split("_")[0], []).append(png.name)
    for name, text in pages(data, figures).items():
        write_text(DOCS / name, text)


def changed_stages() -> list[str]:
    """The stages `dvc status` finds changed (none: every output is what the pipeline's
    current code, params and data make), waiting as `dvc --wait-for-lock` does for a DVC
    command that holds the workspace."""
    from dvc.repo import Repo

    with Repo(_wait_for_lock=True) as repo:
        return sorted(repo.status())

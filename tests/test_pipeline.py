"""The real DVC pipeline, smoke profile, in a temporary clone of this checkout: one full run
(the `first_run` fixture) checked by the tests that follow it, then re-runs and experiments in
the same clone. (The remote scenarios built on the same first run are in
tests/test_pipeline_remote.py; the queued-grid recipe has its own clone: tests/test_queue.py.)"""

import json
import math
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.workspace import FirstRun, ran_stages, sh

TIMING = {"train_seconds", "tokens_per_s", "eval_seconds", "s_per_step"}
FIGURES = ["accuracy_vs_params", "accuracy_vs_length", "val_loss_vs_params", "length_distribution"]
MODULAR_FIGURES = ["sanity_curves", "sanity_dynamics", "data_curves", "data_metrics", "orders_curves", "size_curves",
                   "size_metrics", "size_params", "compute_curves", "compute_metrics", "compute_budgets",
                   "regularization_curves", "regularization_metrics"]
CHARLM_MODELS = ["rnn", "multi-rnn", "gru", "transformer-1", "transformer-8"]
# Every `dvc exp run` composes params.yaml from conf/config.yaml, so each names the profile.
SMOKE = ["-S", "profile=smoke"]

pytestmark = pytest.mark.skipif(shutil.which("git") is None, reason="needs git")


def run(args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    """A command of this environment run in `cwd`, its exit status and output kept."""
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    return subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True)


def metrics(path: Path) -> dict:
    summary = json.loads((path / "metrics" / "summary.json").read_text())
    return {task: {cell: {k: v for k, v in m.items() if k not in TIMING} for cell, m in runs.items()}
            for task, runs in summary.items()}


@pytest.fixture(scope="module")
def first_run(smoke_first_run) -> FirstRun:
    """The whole pipeline, smoke profile: the one full run the tests below check
    (tests/workspace.py; the remote scenarios in test_pipeline_remote.py share it)."""
    return smoke_first_run


@pytest.fixture(scope="module")
def clone(smoke_first_run) -> Path:
    """The clone the first run left: the later tests here run DVC in it."""
    return smoke_first_run.clone


# --- what the first run wrote -----------------------------------------------------------------

def test_expr_cells_are_all_trained_and_scored(first_run, clone):
    assert "train-expr@retran-large-0" in ran_stages(first_run.out)
    summary = first_run.summary
    cells = {f"{m}-{s}-0" for m in ("gpt", "lstm", "retran") for s in ("small", "large")}
    assert set(summary["expr"]) == cells
    for record in summary["expr"].values():
        assert {"params", "test_acc", "ood_acc", "best_val_loss", "train_seconds"} <= set(record)
        assert 0 <= record["test_acc"] <= 1 and 0 <= record["ood_acc"] <= 1
    assert summary["expr"]["gpt-large-0"]["params"] == 1_194_496
    for split in ("train", "valid", "test", "ood"):
        assert (clone / "data" / "expr" / f"{split}.parquet").is_file()


def test_each_stage_lists_exactly_the_params_it_reads(first_run, clone):
    """Every key a stage's process read is under one of the stage's `params:` in dvc.yaml (else
    changing it would not re-run the stage), and every listed key was read (else changing it
    would re-run the stage for nothing). A block read whole covers the keys listed inside it."""
    from dvc.repo import Repo

    declared = {}
    for stage in Repo(str(clone)).index.stages:
        keys = [k for dep in stage.deps if type(dep).__name__ == "ParamsDependency"
                for k in dep.params]
        declared[stage.cmd] = (stage.addressing, keys)
    runs = [json.loads(line) for line in first_run.reads.read_text().splitlines()]
    # every recording is a stage's, and every stage that lists params recorded its reads
    # (code-deps loads no params; the report stages load them and read none)
    recorded = {"arithrepro " + " ".join(r["argv"]) for r in runs}
    assert recorded <= set(declared)
    assert {cmd for cmd, (_, keys) in declared.items() if keys} <= recorded

    def under(key, block):
        return key == block or key.startswith(block + ".")

    wrong = {}
    for r in runs:
        name, keys = declared["arithrepro " + " ".join(r["argv"])]
        unlisted = sorted(k for k in r["read"] if not any(under(k, d) for d in keys))
        unread = sorted(d for d in keys
                        if not any(under(k, d) or under(d, k) for k in r["read"]))
        if unlisted or unread:
            wrong[name] = {"read, not listed": unlisted, "listed, not read": unread}
    assert wrong == {}


def test_abacus_and_looped_records(first_run):
    summary = first_run.summary
    assert set(summary["abacus"]) == {"abacus-l2r2-0"}
    assert set(summary["looped"]) == {"standard-notebook-0", "looped-notebook-0"}
    for task in ("abacus", "looped"):
        for record in summary[task].values():
            assert {"params", "train_seconds", "id_acc", "ood_acc"} <= set(record)
    assert {"acc_r1", "acc_r2", "ood_r1", "acc_diag8"} <= set(summary["abacus"]["abacus-l2r2-0"])
    assert {"acc_len8", "acc_len24", "digit_acc_len24"} <= set(summary["looped"]["looped-notebook-0"])
    assert summary["looped"]["standard-notebook-0"]["params"] == 2_388_874  # nn.TransformerEncoder at its defaults


def test_modular_studies(first_run):
    modular = first_run.summary["modular"]
    assert {"gpt-sin-sanity-0", "lstm-std-sanity-0", "lstm-std-data.r0.3-0", "gpt-sin-size.L1d8-0",
            "gpt-sin-compute.B16-0", "gpt-sin-orders-0",
            "lstm-std-regularization.wd0.5-0"} <= set(modular)
    assert len(modular) == 11
    assert {"train_loss", "val_loss", "train_acc", "val_acc", "val_acc_step", "dt_acc_steps",
            "param_norm", "params"} <= set(modular["gpt-sin-sanity-0"])
    # post-norm blocks (the homework's released Block): no LayerNorm after the last
    assert modular["gpt-sin-sanity-0"]["params"] == 2 * (12 * 16 ** 2 + 8 * 16) + 16 * 12 + 12
    assert {"a0.5_val_acc", "a1_val_acc"} <= set(modular["gpt-sin-compute.B8-0"])
    assert {"o2_val_acc", "o3_val_acc"} <= set(modular["gpt-sin-orders-0"])
    assert first_run.read("metrics/modular.md").startswith("# modular")
    assert r"\begin{tabular}" in first_run.read("metrics/modular.tex")


def test_charlm_records_samples_and_compute_table(first_run):
    charlm = first_run.summary["charlm"]
    assert set(charlm) == {f"{m}-s16-0" for m in CHARLM_MODELS}
    for record in charlm.values():
        assert {"final_val_loss", "best_val_loss", "final_bpc", "params", "train_seconds",
                "tokens_per_s"} <= set(record)
        assert record["best_bpc"] == pytest.approx(record["best_val_loss"] / math.log(2))
    samples = first_run.read("metrics/charlm/samples.md")
    # one random start token and 40 characters each (smoke), the GRU greedy as in the source
    assert all(f"## {m}-s16-0\n\nRule: " in samples for m in CHARLM_MODELS)
    assert "## gru-s16-0\n\nRule: greedy, the argmax of the logits; 1 + 40 characters." in samples
    assert "## rnn-s16-0\n\nRule: softmax, drawn from softmax(logits / 1); 1 + 40 characters." in samples
    compute = first_run.read("metrics/charlm/compute.md")
    assert "## T = 16" in compute and all(f"| {m} (" in compute for m in CHARLM_MODELS)


def test_tables_and_summary_csv(first_run):
    csv = first_run.read("metrics/summary.csv").splitlines()
    assert csv[0].startswith("task,model,size,seed") and len(csv) == 1 + 6 + 1 + 2 + 11 + 5
    for task in ("expr", "abacus", "looped"):
        assert first_run.read(f"metrics/{task}.md").startswith(f"### {task}")
    assert "looped: exact match by length" in first_run.read("metrics/looped.md")


def test_every_figure_is_a_png(first_run):
    pngs = [f"expr/{name}.png" for name in FIGURES] + [
        "abacus/heatmaps/abacus-l2r2-0.png", "abacus/ood_vs_recurrences.png",
        "looped/accuracy_vs_digits.png", "modular/attention/sample1.png"] + [
        f"modular/{name}.png" for name in MODULAR_FIGURES] + [
        "charlm/loss_curves.png", "charlm/attention/transformer-1-s16-0.png",
        "charlm/attention/transformer-8-s16-0.png"]
    for name in pngs:
        assert (first_run.saved / "plots" / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", name


def test_the_results_page_and_the_readmes_block(first_run, tmp_path):
    """The stage writes its pages to pages/ (a DVC output); docs/ and README.md, the published
    copy, are left as the commit has them, and a smoke run's pages are refused publication."""
    gpu = first_run.saved / "gpu"
    summary = (gpu / "pages" / "results.md").read_text()
    assert "profile **smoke**" in summary and "25 runs" in summary
    tasks = ("expr", "abacus", "looped", "modular", "charlm")
    assert all(f"](results/{task}.md)" in summary for task in tasks)
    pages = {t: (gpu / "pages" / "results" / f"{t}.md").read_text() for t in tasks}
    assert all(pages[t].startswith(f"# Results: {t}\n") for t in tasks)
    shown = [name for text in pages.values() for name in re.findall(r"!\[[^]]*\]\(([^)]+)\)", text)]
    assert len(shown) == 8, shown
    for name in shown:
        assert (gpu / "pages" / "results" / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", name
    data = json.loads((gpu / "pages" / "results.json").read_text())
    assert data["runs"] == 25 and len(data["origin"]["commit"]) == 1
    tracked = ["docs/results.md", "docs/results.json", "docs/results", "README.md"]
    assert sh(["git", "status", "--porcelain", "--", *tracked], gpu) == ""
    # the smoke run is complete (`dvc status` finds nothing changed), yet never published
    up = sh([sys.executable, "-c", "from arithrepro.stages.results import changed_stages; "
             "print(changed_stages())"], gpu)
    assert up.strip().splitlines()[-1] == "[]"
    refused = run(["arithrepro", "results", "--publish"], gpu)
    assert refused.returncode != 0 and "pages/results.json: from the smoke profile" in refused.stderr
    assert sh(["git", "status", "--porcelain", "--", *tracked], gpu) == ""
    # the README's blocks, rendered from the same results as if a full profile made them
    (tmp_path / "docs").mkdir()
    shutil.copy(gpu / "README.md", tmp_path)
    (tmp_path / "docs" / "results.json").write_text(json.dumps({**data, "profile": "smoke"}))
    refused = run(["arithrepro", "results", "--readme"], tmp_path)
    assert refused.returncode != 0 and "from the smoke profile" in refused.stderr
    (tmp_path / "docs" / "results.json").write_text(json.dumps({**data, "profile": "cpu"}))
    sh(["arithrepro", "results", "--readme"], tmp_path)
    readme = (tmp_path / "README.md").read_text()
    block = readme.split("## Results", 1)[1].split("\n## ", 1)[0]
    assert "| expr | gpt small: test_acc" in block and "The 25 runs the claims above rest on" in block
    assert readme.count("From profile **cpu**, 25 runs") == 1


def test_a_smoke_try_leaves_the_checkout_as_it_was(tmp_path):
    """`make smoke` (`arithrepro smoke`) runs in a copy of the checkout: params.yaml, dvc.lock,
    the tracked results and README stay as committed, and `make repro` afterwards would run the
    default profile. (Its first stages only, which are what touch the workspace's files.)"""
    from tests.workspace import make_clone

    clone = make_clone(tmp_path / "clone")
    out = run(["arithrepro", "smoke", "generate-looped"], clone)
    assert out.returncode == 0, out.stderr
    assert "its page: .dvc/tmp/smoke/pages/results.md" in out.stderr
    assert sh(["git", "status", "--porcelain", "--untracked-files=no"], clone) == ""
    copy = clone / ".dvc" / "tmp" / "smoke"
    assert "profile: smoke" in (copy / "params.yaml").read_text()
    assert (copy / "data" / "looped").is_dir() and not (clone / "data").exists()
    assert "profile: cpu" in (clone / "params.yaml").read_text()


def test_every_plot_renders(first_run):
    """`dvc plots show` draws every declared plot from data: each folder of plot data under
    plots/ is declared (top level) or is a stage's plots output, and no plot fails to load or
    comes out empty. The dvclive series are among them."""
    gpu = first_run.saved / "gpu"
    shown = dvc_json(["plots", "show", "--json", "-o", str(gpu.parent / "plots-json")], gpu)
    assert shown.get("errors") in (None, []), shown.get("errors")
    problems = {}
    for name, renders in shown["data"].items():
        for r in renders:
            if r["type"] == "vega" and not r["content"]["data"]["values"]:
                problems[name] = "no data"
            if r["type"] == "image" and not Path(r["url"]).read_bytes().startswith(b"\x89PNG"):
                problems[name] = "not a PNG"
    assert problems == {}
    drawn = {Path(name).parent.as_posix() for name in shown["data"]} | set(shown["data"])
    data_dirs = {p.relative_to(gpu).as_posix() for p in (gpu / "plots").rglob("*")
                 if p.is_dir() and any(f.suffix in (".csv", ".tsv", ".json", ".png")
                                       for f in p.iterdir() if f.is_file())}
    assert data_dirs - drawn == set()
    assert "runs/expr/gpt-small-0/live/plots/metrics/train/loss.tsv" in shown["data"]
    assert "runs/abacus/abacus-l2r2-0/live/plots/metrics/val/loss.tsv" in shown["data"]
    heatmap = shown["data"]["plots/abacus/eval/abacus-l2r2-0.csv"][0]["content"]
    assert heatmap["spec"]["layer"][0]["mark"] == "rect"


def dvc_json(args: list[str], repo: Path):
    """A `dvc ... --json` command's output, parsed (DVC may print notices before it)."""
    out = sh(["dvc", *args], repo)
    return json.loads(out[out.index("{"):])


def test_dvclive_leaves_the_pipeline_definition_alone(first_run, clone):
    """dvclive logs every training run without a dvc.yaml of its own and without touching the
    pipeline's (dvcyaml=None)."""
    assert sh(["git", "status", "--porcelain", "--", "dvc.yaml"], clone) == ""
    assert [p for p in clone.rglob("dvc.yaml") if ".dvc" not in p.parts] == [clone / "dvc.yaml"]


def test_the_headline_is_the_default_metrics(first_run):
    """`dvc metrics show` (and `dvc exp show`) display metrics/headline.json: each task's few
    numbers per model and size; summary.json keeps every record's metrics beside it."""
    gpu = first_run.saved / "gpu"
    shown = dvc_json(["metrics", "show", "--json"], gpu)
    files = next(iter(shown.values()))["data"]  # the workspace
    assert set(files) == {"metrics/headline.json"}
    headline = files["metrics/headline.json"]["data"]
    assert set(headline) == {"expr", "abacus", "looped", "modular", "charlm"}
    assert set(headline["expr"]) == {f"{m}-{s}" for m in ("gpt", "lstm", "retran")
                                     for s in ("small", "large")}
    assert set(headline["expr"]["gpt-small"]) == {"test_acc", "ood_acc"}  # one seed: no std
    assert set(headline["modular"]) == {"gpt-sin-sanity", "lstm-std-sanity"}
    assert headline["charlm"]["gru-s16"]["final_bpc"] == first_run.summary["charlm"]["gru-s16-0"]["final_bpc"]


def test_a_clone_compares_its_first_run_with_the_committed_reference(first_run):
    """git tracks metrics/headline.json, so the clone's first commit holds the reference run's
    numbers (the cpu profile's): `dvc metrics diff` sets the first run's beside them."""
    gpu = first_run.saved / "gpu"
    first = sh(["git", "rev-list", "--max-parents=0", "HEAD"], gpu).split()[0]
    reference = json.loads(sh(["git", "show", f"{first}:metrics/headline.json"], gpu))
    diff = dvc_json(["metrics", "diff", first, "--json"], gpu)["metrics/headline.json"]
    key = diff["expr.gpt-small.test_acc"]
    assert key["old"] == reference["expr"]["gpt-small"]["test_acc"]
    assert key["new"] == first_run.summary["expr"]["gpt-small-0"]["test_acc"]


# --- running again ----------------------------------------------------------------------------
# These run `dvc repro` or experiments in the clone the first run left. Each needs the workspace
# as some experiment left it (outputs up to date with params.yaml). The experiments build on
# each other in one order, which their fixtures fix whatever order the tests run in.

def test_nothing_reruns_when_nothing_changed(first_run, clone):
    assert "Running stage" not in sh(["dvc", "repro"], clone)


def test_a_forced_rerun_gives_the_same_metrics(first_run, clone, tmp_path):
    """The data and the first run of every training family (a grid task's first cell and its
    evaluation, the first run of the modular studies and of charlm) again from scratch, in a copy
    of the clone, give the same metrics, all but the timings. The other cells of a family run the
    same code on other settings, and the stages after them only read what these write, so
    running them again would only multiply the test's time: `dvc status` shows that only they
    are out of date (the timings they read changed), no data, training or evaluation."""
    from arithrepro.pipeline import family_of

    before = metrics(clone)
    again = tmp_path / "again"
    shutil.copytree(clone, again, symlinks=True)
    names = sh(["dvc", "stage", "list", "--name-only"], again).split()
    first = {}
    for name in names:
        family = family_of(name)
        # of the benchmark's, the one cell through the pairs adapter (the others run the grid
        # tasks' code on other registry models)
        if "-bench-" in family and not family.endswith("-looped-lstm"):
            continue
        if family.startswith(("generate-", "train-", "evaluate-")):
            first.setdefault(family, name)
    # the grid tasks' three families, modular, charlm, a benchmark cell's two
    assert len(first) == 3 * 3 + 2 + 2, first
    out = sh(["dvc", "repro", "-f", "-s", *first.values(), "aggregate-tables"], again,
             OMP_NUM_THREADS="1")   # the first run's threads: the same bits
    assert ran_stages(out) == {*first.values(), "aggregate-tables"}
    assert metrics(again) == before
    stale = dvc_json(["status", "--json"], again)
    assert stale and not any(s.startswith(("train-", "evaluate-", "generate-", "charlm-corpus"))
                             for s in stale), stale


# The clone's one experiment: a sampling temperature, which trains nothing. (A sweep extended, an
# architecture changed, a learning rate and an evaluation-only key are the remote scenarios'
# change of params, in a pulled clone: tests/test_pipeline_remote.py.)
SAMPLED = [*SMOKE, "-S", "charlm.sample.temperature=0.5"]


@pytest.fixture(scope="module")
def sampled_run(first_run, clone) -> str:
    return sh(["dvc", "exp", "run", *SAMPLED], clone)


def test_a_sampling_temperature_resamples_and_trains_nothing(sampled_run, clone):
    ran = ran_stages(sampled_run)
    assert ran == {"charlm-sample"}, ran
    assert "softmax(logits / 0.5)" in (clone / "metrics" / "charlm" / "samples.md").read_text()


def test_bad_params_stop_the_pipeline_with_one_line(clone):
    params = (clone / "params.yaml").read_text()
    try:
        (clone / "params.yaml").write_text(params.replace("lr: 0.006", 'lr: "0.006"'))
        proc = subprocess.run([str(Path(sys.executable).parent / "arithrepro"), "train", "--task",
                               "expr", "lstm-small-0"],
                              cwd=clone, capture_output=True, text=True)
        assert proc.returncode == 2
        assert proc.stderr.strip() == "error: params: models.lstm.lr = '0.006': expected a number > 0"
    finally:
        (clone / "params.yaml").write_text(params)


def test_the_experiments_fit_a_screen(sampled_run, clone):
    """`arithrepro exps`: the clone's experiments side by side, what differs and the headline
    metrics, within 200 characters; a task's view keeps that task's keys."""
    out = sh(["arithrepro", "exps"], clone)
    lines = out.splitlines()
    assert max(map(len, lines)) <= 200, max(map(len, lines))
    for key in ("charlm.sample.temperature", "expr.gpt-small.test_acc"):
        assert any(line.startswith(key) for line in lines), key
    charlm = sh(["arithrepro", "exps", "--task", "charlm"], clone).splitlines()
    assert any(line.startswith("charlm.sample.temperature") for line in charlm)
    assert not any(line.startswith(("models.", "expr.")) for line in charlm)


def test_added_seeds_train_as_one_ensemble_and_dvc_records_them(sampled_run, clone):
    """`arithrepro repro --ensemble`: two new seeds of a configuration train as one ensemble in
    one process, and DVC records them as its own run would (dvc.lock, cache, run cache): a plain
    `dvc repro` of them then runs nothing."""
    sh(["arithrepro", "compose-params", *SAMPLED, "-S", "charlm.seeds=[0,1,2]"], clone)
    cells = ["train-charlm@gru-s16-1", "train-charlm@gru-s16-2"]
    out = sh(["arithrepro", "repro", "--ensemble", "--jobs", "1", *cells], clone)
    assert "start train-charlm@gru-s16-1 (+1 as one ensemble)" in out, out
    assert "one of 2 runs in an ensemble" in out
    for seed in (1, 2):
        record = json.loads((clone / "runs" / "charlm" / f"gru-s16-{seed}" / "train.json").read_text())
        assert record["trained_with"] == 2 and record["seed"] == seed
    assert "Running stage" not in sh(["dvc", "repro", *cells], clone)
    lock = (clone / "dvc.lock").read_text()
    assert all(f"{c}:" in lock for c in cells)

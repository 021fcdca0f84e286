"""charlm's data: the offline corpus, the TinyStories loader on local files, the vocabulary,
chunks and split, the compute formulas and table, the samples (start, length, rule), the
source's architectures and params errors."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from arithrepro import config
from arithrepro.cost import formulas, measure
from tests.helpers import overridden
from arithrepro.models.registry import MODELS
from arithrepro.runs import thaw
from arithrepro.tasks import charlm, charlm_corpus, charlm_sampling
from arithrepro.tasks.charlm import Chunks, chunk, split
from arithrepro.tasks.charlm_corpus import (Vocab, arithmetic_text, build_corpus, file_text,
                                            tinystories_text)

STORIES = ["Once upon a time, a cat sat.\nIt was happy.", "Tom had a red ball.", "The end."]


@settings(max_examples=25, deadline=None)
@given(chars=st.integers(100, 3000), seed=st.integers(0, 10**6))
def test_arithmetic_corpus_lines_are_true_and_seeded(chars, seed):
    text = arithmetic_text(chars, seed)
    assert len(text) == chars and text == arithmetic_text(chars, seed)
    for line in text.split("\n")[:-1]:  # the last line may be cut
        problem, value = line.split("=")
        assert eval(problem) == int(value)  # noqa: S307 - digits, + - * ( )
    assert set(text) <= set("0123456789+-*()=\n")


def test_arithmetic_corpus_differs_by_seed():
    assert arithmetic_text(500, 0) != arithmetic_text(500, 1)


def _expected(n):
    return "\n".join(STORIES)[:n]


def test_python_docs_corpus_is_prose_and_stable():
    text = charlm_corpus.python_docs_text(300_000)
    assert len(text) == 300_000 and text == charlm_corpus.python_docs_text(300_000)
    assert charlm_corpus.python_docs_text(1000) == text[:1000]
    words = text.split()
    assert sum(w.isalpha() and w.islower() for w in words) > 0.5 * len(words)
    assert {".", ",", "(", ")", "'", "\n"} <= set(text) and len(set(text)) > 70
    # past the help() topics (about 465k characters), the standard library's docstrings
    assert len(charlm_corpus.python_docs_text(600_000)) == 600_000


def test_tinystories_txt_file_in_its_own_format(tmp_path):
    path = tmp_path / "TinyStories-train.txt"
    path.write_text("".join(f"{s}\n<|endoftext|>\n" for s in STORIES), encoding="utf-8")
    assert tinystories_text(1000, str(path)) == _expected(1000)
    assert tinystories_text(40, str(path)) == _expected(40)


@pytest.mark.parametrize("fmt", ["jsonl", "parquet", "saved"])
def test_tinystories_dataset_files(tmp_path, fmt):
    import datasets

    rows = datasets.Dataset.from_dict({"text": STORIES})
    if fmt == "jsonl":
        path = tmp_path / "train.jsonl"
        path.write_text("".join(json.dumps({"text": s}) + "\n" for s in STORIES))
    elif fmt == "parquet":
        path = tmp_path / "train.parquet"
        rows.to_parquet(str(path))
    else:
        path = tmp_path / "saved"
        datasets.DatasetDict({"train": rows}).save_to_disk(str(path))
    assert tinystories_text(1000, str(path)) == _expected(1000)
    assert tinystories_text(25, str(path)) == _expected(25)


def test_tinystories_errors_name_the_key(tmp_path):
    with pytest.raises(FileNotFoundError, match="charlm.corpus.path = .*no such file"):
        tinystories_text(100, str(tmp_path / "missing.txt"))
    path = tmp_path / "other.jsonl"
    path.write_text(json.dumps({"story": "x"}) + "\n")
    with pytest.raises(ValueError, match="charlm.corpus.path = .*no `text` column"):
        tinystories_text(100, str(path))
    (tmp_path / "x.bin").write_bytes(b"")
    with pytest.raises(ValueError, match="charlm.corpus.path = .*expected a directory"):
        tinystories_text(100, str(tmp_path / "x.bin"))


def test_tinystories_without_a_hub_is_one_line(tmp_path):
    """No hub (offline): one line naming the key to set, no traceback, within seconds."""
    code = ("from arithrepro.tasks.charlm_corpus import tinystories_text\n"
            "try:\n    tinystories_text(100)\n"
            "except FileNotFoundError as e:\n    print(e)\n")
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1",
           "HF_HOME": str(tmp_path / "hf")}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                         timeout=120)
    line = out.stdout.strip()
    assert "\n" not in line and "could not be loaded from the hub" in line
    assert "set charlm.corpus.path" in line


def test_file_source(tmp_path):
    path = tmp_path / "t.txt"
    path.write_text("héllo wörld\n" * 10, encoding="utf-8")
    assert file_text(str(path), 15) == ("héllo wörld\n" * 2)[:15]
    (tmp_path / "b.txt").write_bytes(b"\xff\xfe\x00bad")
    with pytest.raises(ValueError, match="not UTF-8"):
        file_text(str(tmp_path / "b.txt"), 10)
    c = {"source": "file", "path": str(tmp_path / "one.txt"), "chars": 100, "seed": 0}
    (tmp_path / "one.txt").write_text("aaaa")
    with pytest.raises(ValueError, match="1 distinct"):
        build_corpus(c)


def test_vocab_is_sorted_and_round_trips():
    text = "cab\nba c"
    v = Vocab.of(text)
    assert v.chars == sorted(set(text)) and len(v) == 5
    assert v.decode(v.encode(text)) == text
    with pytest.raises(ValueError, match="charlm.sample.prompt: .*'xz'"):
        v.encode("zax", "charlm.sample.prompt")


@settings(max_examples=30, deadline=None)
@given(n=st.integers(2, 400), seq=st.integers(1, 30), frac=st.floats(0.01, 0.9), seed=st.integers(0, 99))
def test_chunks_and_split(n, seq, frac, seed):
    ids = torch.arange(n)
    chunks = chunk(ids, seq)
    assert chunks.shape == (n // (seq + 1), seq + 1)
    assert torch.equal(chunks.flatten(), ids[:chunks.numel()])  # non-overlapping, in order
    if len(chunks) < 2:
        return
    tr, va = split(len(chunks), frac, seed)
    assert len(tr) >= 1 and len(va) >= 1
    assert sorted(tr.tolist() + va.tolist()) == list(range(len(chunks)))
    tr2, va2 = split(len(chunks), frac, seed)
    assert torch.equal(va, va2)
    data = Chunks.of(ids, seq, frac, seed, "cpu")
    x, y, mask = Chunks.batch(data.train, torch.arange(len(data.train)))
    assert torch.equal(x[:, 1:], y[:, :-1]) and torch.equal(y - x, torch.ones_like(x)) and mask.all()


def test_formulas_at_the_sources_sizes():
    """The source's answers: an RNN needs T·L sequential matmuls to generate and 2·T·L to train
    (backpropagation through time is sequential too); a transformer 6·L per forward pass and
    6·L per backward pass, 12·L to train; generating T tokens takes T cached passes, 6·L·T."""
    f = formulas(MODELS["rnn"], {"layers": 1, "d_model": 256}, 100)
    assert f == {"formula_gen_flops": 4 * 100 * 256**2, "formula_train_flops": 8 * 100 * 256**2,
                 "seq_matmuls_gen": 100, "seq_matmuls_train": 200, "formula": "source"}
    gru = formulas(MODELS["gru"], {"layers": 2, "d_model": 256}, 20)
    assert gru["formula_gen_flops"] == 3 * 4 * 20 * 2 * 256**2
    assert (gru["seq_matmuls_gen"], gru["seq_matmuls_train"]) == (40, 80)
    assert gru["formula"].startswith("ours")   # the source states g = 1 only
    t = formulas(MODELS["nanogpt"], {"layers": 8, "d_model": 128}, 100)
    forward = 24 * 8 * 100 * 128**2 + 4 * 8 * 100**2 * 128
    assert t == {"formula_gen_flops": forward, "formula_train_flops": 3 * forward,
                 "seq_matmuls_gen": 6 * 8 * 100, "seq_matmuls_train": 96, "formula": "source"}


def test_the_compute_table_says_whose_sequential_counts_it_shows():
    import pandas as pd

    from arithrepro.report.charlm_figures import compute_markdown

    rows = []
    for name, model, size in (("rnn", "rnn", {"layers": 1, "d_model": 256}),
                              ("transformer-8", "nanogpt", {"layers": 8, "d_model": 128})):
        rows.append({"model": name, "arch": model, "params": 1000, **size, "T": 100,
                     **formulas(MODELS[model], size, 100),
                     "counted_gen_flops": 1.0, "counted_train_flops": 1.0,
                     "gen_s_per_token": 1e-3, "train_s_per_token": 1e-3})
    md = compute_markdown(pd.DataFrame(rows), "cpu")
    assert "2·T·L to train" in md and "12·L to train" in md
    assert "the source answered 6·L" in md and "6·L·T" in md
    assert "| 100 / 200 |" in md and "| 4,800 / 96 |" in md


def test_counted_flops_include_the_head_and_attention():
    torch.manual_seed(0)
    d, V, T = 32, 10, 16
    rnn = MODELS["rnn"].build({"d_embed": d, "d_model": d, "layers": 1}, dropout=0.0,
                              vocab_size=V, max_len=T, pad_id=-1)
    m = measure(rnn, T, None, repeats=1)
    # generating T tokens from one given: T - 1 input and state products, T - 1 heads
    assert m["counted_gen_flops"] == (T - 1) * 2 * (d * d + d * d + d * V)
    gpt = MODELS["nanogpt"].build({"d_model": d, "heads": 2, "layers": 1}, dropout=0.0,
                                  vocab_size=V, max_len=T, pad_id=-1)
    m = measure(gpt, T, T, repeats=1)
    linear = 3 * T * (24 * d * d + 2 * d * V)  # projections and head, forward + backward
    assert m["counted_train_flops"] > linear  # attention's T^2 terms are counted too
    assert all(v > 0 for v in m.values())


def test_the_step_table_times_every_configuration_in_every_round():
    """charlm-compute's step table: every architecture at every schedule's length, the
    transformers fused and written out, once per round, at the params' batch."""
    from arithrepro import config
    from arithrepro.cost import step_rows

    params = config.validate(config.compose(["profile=smoke"]))
    rows = step_rows(params, rounds=2, warmup=1, timed=1)
    m = params["charlm"]
    archs = m["architectures"]
    expected = {(name, m["schedule"][s]["seq_length"], path) for name, a in archs.items()
                for s in m["schedules"]
                for path in (("fused", "written-out") if a["model"] == "nanogpt" else ("",))}
    assert {(r["model"], r["T"], r["attention"]) for r in rows} == expected
    assert len(rows) == 2 * len(expected) and {r["round"] for r in rows} == {0, 1}
    assert all(r["s_per_100_steps"] > 0 and r["batch_size"] == m["train"]["batch_size"]
               for r in rows)
    # each round starts one configuration later, so none is always timed first
    assert rows[0]["model"] != rows[len(expected)]["model"] or rows[0]["attention"] != rows[len(expected)]["attention"]


def test_written_out_attention_is_the_fused_maths():
    import copy

    from arithrepro.cost import written_out

    torch.manual_seed(0)
    fused = MODELS["nanogpt"].build({"d_model": 32, "heads": 4, "layers": 2}, dropout=0.0,
                                    vocab_size=20, max_len=16, pad_id=-1).eval()
    plain = written_out(copy.deepcopy(fused))
    x = torch.randint(0, 20, (3, 16))
    with torch.no_grad():
        assert torch.allclose(fused(x), plain(x), atol=1e-5)
    # only the copy runs the written-out path
    assert not any("attend" in vars(m) for m in fused.modules())
    assert any("attend" in vars(m) for m in plain.modules())


def _params(**charlm_over):
    params = config.compose(["profile=smoke"])
    params["charlm"] = overridden(params["charlm"], charlm_over)
    return params


@pytest.mark.parametrize("over,message", [
    ({"models": ["lstm"]}, r"charlm.models: 'lstm' is not one of charlm.architectures"),
    ({"schedules": ["s30"]}, r"charlm.schedules: 's30' is not one of charlm.schedule \(s20, s100, s16\)"),
    ({"models": ["rnn", "rnn"]}, r"charlm.models = \['rnn', 'rnn'\]: expected a list without repeats"),
    ({"schedule": {"s20": {"steps": 0}}}, r"charlm.schedule.s20.steps = 0"),
    ({"attention": {"prompt": "x" * 30}, "schedules": ["s20"], "models": ["transformer-1"]},
     "charlm.attention.prompt: 30 characters, longer than transformer-1-s20's block of 20"),
    ({"corpus": {"source": "file"}}, "charlm.corpus.path: missing"),
    ({"architectures": {"gru": {"model": "lstm"}}}, "charlm.architectures.gru.model = 'lstm'"),
    ({"architectures": {"transformer-1": {"heads": 3}}},
     "charlm.architectures.transformer-1.d_model = 16: expected a multiple of heads"),
    ({"sample": {"temperature": 0}}, "charlm.sample.temperature = 0"),
    ({"sample": {"prompt": ""}}, "charlm.sample.prompt = '': expected a non-empty string or null"),
    ({"sample": {"chars": 0}}, "charlm.sample.chars = 0: expected an integer >= 1"),
    ({"sample": {"rule": {"gru": "beam"}}},
     "charlm.sample.rule.gru = 'beam': expected one of softmax, greedy"),
    ({"sample": {"rule": {"lstm": "greedy"}}},
     "charlm.sample.rule.lstm: not one of charlm.architectures"),
    ({"corpus": {"source": "web"}}, "charlm.corpus.source = 'web'"),
])
def test_params_errors_name_the_key(over, message):
    with pytest.raises(config.ParamsError, match=message):
        config.validate(_params(**over))


def test_an_architecture_names_its_missing_field():
    params = _params()
    params["charlm"]["architectures"]["gru"] = {"model": "gru", "d_model": 8, "layers": 1}
    with pytest.raises(config.ParamsError, match="charlm.architectures.gru.d_embed: missing"):
        config.validate(params)


def test_the_paper_profile_is_the_source_on_tinystories():
    params = config.compose(["profile=paper"])
    m = params["charlm"]
    assert m["corpus"]["source"] == "tinystories" and m["corpus"]["chars"] == 10_000_000
    runs = charlm.TASK.runs(params)
    assert [r.name for r in runs][:4] == ["rnn-s20-0", "rnn-s20-1", "rnn-s20-2", "rnn-s100-0"]
    assert len(runs) == 8 * 2 * 3 and str(runs[0].files.dir) == "runs/charlm/rnn-s20-0"
    assert {tuple(m["schedule"][r.label].values()) for r in runs} == {(20, 2000), (100, 3000)}
    # the source's smaller GRU beside the 8-layer transformer at seq_length 100, 3,000 steps
    assert {"gru-small-s100-0", "transformer-8-s100-0"} <= {r.name for r in runs}
    # samples as the source draws them: one random start token, softmax at temperature 1
    assert m["sample"]["prompt"] is None and m["sample"]["chars"] is None


def test_the_source_architectures_and_sampling_are_the_default():
    """Every profile: multi-rnn has the source's plotted 2 layers (multi-rnn-3 and -4 its 3 and
    4), gru-small is the source's
    GRU of embedding 32 and hidden 192 (1.5e5 parameters), and samples are drawn as the source
    draws them: temperature 1, one random start token, the source's lengths, the GRUs greedy."""
    for profile in ("cpu", "paper"):
        m = config.compose([f"profile={profile}"])["charlm"]
        a = m["architectures"]
        assert a["multi-rnn"] == {"model": "rnn", "d_embed": 64, "d_model": 256, "layers": 2}
        for k in (3, 4):   # the rest of the source's depth loop
            assert a[f"multi-rnn-{k}"] == {"model": "rnn", "d_embed": 64, "d_model": 256, "layers": k}
        assert a["gru-small"] == {"model": "gru", "d_embed": 32, "d_model": 192, "layers": 1}
        assert m["sample"] == {"prompt": None, "chars": None, "temperature": 1.0, "seed": 0,
                               "rule": {"gru": "greedy", "gru-small": "greedy"}}
    net = MODELS["gru"].build({"d_embed": 32, "d_model": 192, "layers": 1}, dropout=0.0,
                              vocab_size=88, max_len=100, pad_id=-1)
    assert f"{sum(p.numel() for p in net.parameters()):.1e}" == "1.5e+05"   # the source's print
    smoke = config.compose(["profile=smoke"])["charlm"]
    assert smoke["architectures"]["gru-small"]["d_model"] < 32   # the smoke profile's widths


# --- samples ---------------------------------------------------------------------------------

def _sample_params(models, **sample):
    params = _params(models=models, sample=sample)
    config.validate(params)
    return params


def _untrained(params, run, vocab_size):
    model, size = run.config.architecture["model"], thaw(run.config.architecture["size"])
    block = run.config.architecture["dims"]["max_len"]
    torch.manual_seed(run.seed)
    return MODELS[model].build(size, dropout=0.0, vocab_size=vocab_size, max_len=block,
                               pad_id=-1).eval()


def test_a_random_start_token_from_the_seed_and_the_sources_lengths():
    """prompt null: one start token drawn from the vocabulary by the sample seed's generator
    (the same for every run); then 99 characters for a recurrent model (100 in all, the
    source's length=100) and 100 for a transformer (max_new_tokens=100)."""
    vocab = Vocab([chr(32 + i) for i in range(40)])
    params = _sample_params(["rnn", "transformer-1"], chars=None, prompt=None, seed=7)
    rnn, gpt = charlm.TASK.runs(params)
    got = {}
    for run in (rnn, gpt):
        net = _untrained(params, run, len(vocab))
        prompt, drawn, rule = charlm_sampling.draw_sample(net, run, params, vocab)
        again = charlm_sampling.draw_sample(net, run, params, vocab)
        assert torch.equal(prompt, again[0]) and torch.equal(drawn, again[1])   # seeded
        assert rule == "softmax" and len(prompt) == 1
        got[run.model] = (prompt, drawn)
    start = torch.randint(len(vocab), (1,), generator=torch.Generator().manual_seed(7))
    assert got["rnn"][0].tolist() == got["transformer-1"][0].tolist() == start.tolist()
    assert len(got["rnn"][0]) + len(got["rnn"][1]) == 100
    assert len(got["transformer-1"][0]) + len(got["transformer-1"][1]) == 101
    other = _sample_params(["rnn"], chars=None, prompt=None, seed=8)
    starts = {int(charlm_sampling.sample_prompt(other["charlm"]["sample"], vocab,
                                       torch.Generator().manual_seed(s))) for s in range(20)}
    assert len(starts) > 5   # uniform over the vocabulary, not a fixed token


def test_a_string_prompt_and_a_set_length_still_serve():
    vocab = Vocab.of("the cat sat on a mat")
    params = _sample_params(["gru"], prompt="the cat", chars=12)
    (run,) = charlm.TASK.runs(params)
    prompt, drawn, rule = charlm_sampling.draw_sample(_untrained(params, run, len(vocab)), run, params,
                                             vocab)
    assert vocab.decode(prompt) == "the cat" and len(drawn) == 12 and rule == "greedy"


@pytest.mark.parametrize("model", ["gru", "rnn", "transformer-1"])
def test_the_greedy_rule_is_argmax_decoding(model):
    """A run whose rule is greedy (the source's GRU) generates what batched greedy decoding
    does; the same run under softmax sampling draws other text."""
    from arithrepro.decoding import greedy_decode

    vocab = Vocab([chr(65 + i) for i in range(13)])
    params = _sample_params([model], prompt="ABC", chars=12, rule={model: "greedy"})
    (run,) = charlm.TASK.runs(params)
    net = _untrained(params, run, len(vocab))
    prompt, drawn, rule = charlm_sampling.draw_sample(net, run, params, vocab)
    want = greedy_decode(net, prompt.view(1, -1), torch.tensor([3]), 12, stop_id=-1)[0]
    assert rule == "greedy" and drawn.tolist() == want.tolist()
    soft = _sample_params([model], prompt="ABC", chars=12, rule={model: "softmax"})
    assert charlm_sampling.draw_sample(net, run, soft, vocab)[1].tolist() != want.tolist()


def test_only_the_grus_sample_greedily_by_default():
    params = config.compose(["profile=paper"])
    rules = {name: charlm_sampling.sample_rule(params, name) for name in params["charlm"]["models"]}
    assert rules == {"rnn": "softmax", "multi-rnn": "softmax", "multi-rnn-3": "softmax",
                     "multi-rnn-4": "softmax", "gru": "greedy",
                     "gru-small": "greedy", "transformer-1": "softmax",
                     "transformer-8": "softmax"}


@pytest.mark.parametrize("models", [["rnn", "gru", "transformer-1"], ["rnn", "gru"]])
def test_the_sample_stage_writes_each_runs_rule(tmp_path, models):
    """charlm-sample on untrained models: every run's heading, rule and text; the attention
    maps' folder, a DVC output, exists even when no model attends."""
    import yaml
    from click.testing import CliRunner

    from arithrepro.stages.charlm_sample import charlm_sample

    assert _corpus_stage(tmp_path, {"chars": 3000}).exit_code == 0
    params = _params(models=models, corpus={"chars": 3000}, sample={"chars": None})
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(params, allow_unicode=True))
    cwd = os.getcwd()
    os.chdir(tmp_path)
    try:
        _, vocab, _ = charlm_corpus.read_corpus(Path("data/charlm"))
        for run in charlm.TASK.runs(params):
            model, size = run.config.architecture["model"], thaw(run.config.architecture["size"])
            net = _untrained(params, run, len(vocab))
            run.files.dir.mkdir(parents=True)
            torch.save({"model": model, "size": size, "dropout": 0.0,
                        "dims": {"vocab_size": len(vocab), "max_len": 16, "pad_id": -1},
                        "state_dict": net.state_dict()}, run.files.dir / "model.pt")
        result = CliRunner().invoke(charlm_sample, [])
        assert result.exit_code == 0, result.output
        samples = (tmp_path / "metrics" / "charlm" / "samples.md").read_text()
    finally:
        os.chdir(cwd)
    assert "one token drawn uniformly from the vocabulary" in samples
    assert "## rnn-s16-0\n\nRule: softmax, drawn from softmax(logits / 1); 1 + 99 characters." in samples
    assert "## gru-s16-0\n\nRule: greedy, the argmax of the logits; 1 + 99 characters." in samples
    maps = sorted(p.name for p in (tmp_path / "plots" / "charlm" / "attention").iterdir())
    assert maps == (["transformer-1-s16-0.png"] if "transformer-1" in models else [])
    if "transformer-1" in models:
        assert ("## transformer-1-s16-0\n\nRule: softmax, drawn from softmax(logits / 1); "
                "1 + 100 characters.") in samples


def _corpus_stage(tmp_path, corpus: dict):
    """`arithrepro charlm-corpus` in tmp_path with the smoke profile and this corpus block."""
    import yaml
    from click.testing import CliRunner

    from arithrepro.stages.charlm_corpus import charlm_corpus

    params = config.compose(["profile=smoke"])
    params["charlm"]["corpus"] = overridden(params["charlm"]["corpus"], corpus)
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(params, allow_unicode=True))
    cwd = os.getcwd()
    os.chdir(tmp_path)
    try:
        return CliRunner().invoke(charlm_corpus, [])
    finally:
        os.chdir(cwd)


def test_corpus_stage_reads_a_local_tinystories_copy_and_a_text_file(tmp_path):
    stories = tmp_path / "TinyStories-train.txt"
    stories.write_text("".join(f"{s}\n<|endoftext|>\n" for s in STORIES), encoding="utf-8")
    result = _corpus_stage(tmp_path, {"source": "tinystories", "path": str(stories), "chars": 100})
    assert result.exit_code == 0, result.output
    meta = json.loads((tmp_path / "data" / "charlm" / "meta.json").read_text())
    text = (tmp_path / "data" / "charlm" / "corpus.txt").read_text(encoding="utf-8")
    assert text == _expected(100) and meta["vocab"] == sorted(set(text))
    assert meta["source"] == "tinystories" and meta["chars"] == len(text) == 71  # all there is

    plain = tmp_path / "notes.txt"
    plain.write_text("the quick brown fox\n" * 20)
    result = _corpus_stage(tmp_path, {"source": "file", "path": str(plain), "chars": 150})
    assert result.exit_code == 0, result.output
    assert (tmp_path / "data" / "charlm" / "corpus.txt").read_text() == ("the quick brown fox\n" * 20)[:150]


def test_corpus_stage_stops_with_one_line_and_writes_nothing(tmp_path):
    missing = tmp_path / "nowhere.txt"
    result = _corpus_stage(tmp_path, {"source": "tinystories", "path": str(missing), "chars": 100})
    assert result.exit_code == 1
    assert result.output.strip() == f"error: charlm.corpus.path = {str(missing)!r}: no such file or directory"
    assert not (tmp_path / "data").exists()

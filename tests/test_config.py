"""params.yaml validation: one line naming the key, the value and what is allowed; nothing written."""

import copy
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from arithrepro import config

ROOT = Path(__file__).resolve().parents[1]
PARAMS = yaml.safe_load((ROOT / "params.yaml").read_text())


def mutated(change):
    p = copy.deepcopy(PARAMS)
    change(p)
    return p


def test_the_shipped_params_are_valid():
    assert config.load(ROOT / "params.yaml")["profile"] in config.profiles(ROOT / "conf")


def test_every_profile_composes_to_valid_params():
    assert set(config.validate_profiles(ROOT / "conf")) == {"smoke", "cpu", "paper"}


def test_a_bad_value_in_a_profile_names_the_key_and_the_composition(tmp_path):
    shutil.copytree(ROOT / "conf", tmp_path / "conf")
    cpu = tmp_path / "conf" / "profile" / "cpu.yaml"
    cpu.write_text(cpu.read_text().replace("batch_size: 64, epochs", "batch_size: 2.5, epochs"))
    with pytest.raises(config.ParamsError) as err:
        config.validate_profiles(tmp_path / "conf")
    assert str(err.value) == ("expr.train.batch_size = 2.5: expected an integer >= 1 (composed from "
                              f"{tmp_path / 'conf'}/ with profile=cpu)")


@pytest.mark.parametrize("change,message", [
    (lambda p: p["models"]["gpt"].update(lr="0.02"), "models.gpt.lr = '0.02': expected a number > 0"),
    (lambda p: p["models"]["gpt"].update(lr=-1), "models.gpt.lr = -1: expected a number > 0"),
    (lambda p: p.update(profile="GPU!"), "profile = 'GPU!': expected a profile name"),
    (lambda p: p.update(compile="fast"), "compile = 'fast': expected false, true, reduce-overhead or max-autotune"),
    (lambda p: p["models"]["gpt"].update(micro_batches=0), "models.gpt.micro_batches = 0: expected an integer"),
    (lambda p: p["expr"].update(models=["gpt", "rnn"]), "expr.models[1] = 'rnn': expected one of"),
    (lambda p: p["expr"].update(sizes=["huge"]), "expr.sizes: 'huge' is not a size of gpt"),
    (lambda p: p["models"]["lstm"].update(dropout=1.0), "models.lstm.dropout = 1.0: expected a number in [0, 1)"),
    (lambda p: p["expr"]["train"].update(batch_size=2.5),
     "expr.train.batch_size = 2.5: expected an integer >= 1"),
    (lambda p: p["models"]["gpt"]["sizes"]["small"].update(heads=5), "models.gpt.sizes.small.d_sa = 32"),
    (lambda p: p["models"]["gpt"].update(lrr=1), "models.gpt.lrr: unknown key (did you mean models.gpt.lr?); allowed: lr, dropout, micro_batches, sizes"),
    (lambda p: p["expr"]["train"].pop("loss_on"), "expr.train.loss_on: missing"),
    (lambda p: p["expr"]["train"].update(loss_on="some"), "expr.train.loss_on = 'some': expected one of answer, all"),
    (lambda p: p["abacus"]["train"].update(optimizer="sgd"), "abacus.train.optimizer = 'sgd': expected one of lamb, adam, adamw"),
    (lambda p: p["abacus"]["train"].update(progressive="yes"), "abacus.train.progressive = 'yes': expected true or false"),
    (lambda p: p["abacus"].update(models=["gpt"]), "abacus.models: gpt takes tokens, not abacus's own form (digit-tokens)"),
    (lambda p: p["abacus"].update(models=["looped"]), "abacus.models: model looped takes pairs"),
    (lambda p: p["looped"].update(models=["rnn"]), "looped.models[0] = 'rnn': expected one of"),
    (lambda p: p["abacus"]["model"].update(heads=5), "abacus.model.d_model = 64: expected a multiple of heads (5)"),
    (lambda p: p["abacus"]["data"].update(grid_max=5), "abacus.data.grid_max = 5: expected > max_digits"),
    (lambda p: p["abacus"]["data"].update(diagonal=[3]), "abacus.data.diagonal = [3]: expected lengths > grid_max"),
    (lambda p: p["abacus"]["train"].update(lr=0.1), "abacus.train.lr: unknown key"),
    (lambda p: p["abacus"]["eval"].pop("recurrences"), "abacus.eval.recurrences: missing"),
    (lambda p: p["looped"]["data"].update(eval_digits=[8, 200]), "looped.data.max_positions = 100: expected >= 201"),
    (lambda p: p["looped"]["data"].update(variant="hex"), "looped.data.variant = 'hex': expected one of decimal, binary"),
    (lambda p: p["abacus"].update(seeds=[0, 0]), "abacus.seeds = [0, 0]: expected a list without repeats"),
    (lambda p: p["expr"]["data"].update(ood_min_in=5), "expr.data.ood_min_in = 5: expected > expr.data.max_in"),
    (lambda p: p.update(chess={}), "chess: unknown key"),
    (lambda p: p.update(profiles={}), "profiles: unknown key"),
])
def test_bad_values_are_named(change, message):
    with pytest.raises(config.ParamsError) as err:
        config.validate(mutated(change))
    assert message in str(err.value)
    assert "\n" not in str(err.value)


@pytest.mark.parametrize("value", [False, True, "reduce-overhead"])
def test_compile_takes_a_bool_or_a_mode(value):
    config.validate(mutated(lambda p: p.update(compile=value)))


def test_yaml_floats_with_exponent_are_numbers(tmp_path):
    text = (ROOT / "params.yaml").read_text().replace("lr: 0.01", "lr: 1e-2")
    (tmp_path / "p.yaml").write_text(text)
    assert config.load(tmp_path / "p.yaml")["models"]["gpt"]["lr"] == 0.01


def test_cli_refuses_a_string_learning_rate_before_any_work(tmp_path):
    bad = mutated(lambda p: p["models"]["gpt"].update(lr="fast"))
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(bad))
    before = set(tmp_path.rglob("*"))
    for args in (["generate-datasets", "--task", "expr"],
                 ["train", "--task", "expr", "lstm-small-0"]):
        proc = subprocess.run([sys.executable, "-m", "arithrepro.cli", *args], cwd=tmp_path,
                              capture_output=True, text=True)
        assert proc.returncode == 2
        assert proc.stderr.strip() == "error: params: models.gpt.lr = 'fast': expected a number > 0"
        assert "Traceback" not in proc.stderr
    assert set(tmp_path.rglob("*")) == before  # nothing written


@pytest.mark.parametrize("command", ["train", "evaluate"])
def test_cli_names_an_unknown_run(tmp_path, command):
    """Both name a run the same way, and refuse one the params lack the same way."""
    (tmp_path / "params.yaml").write_text((ROOT / "params.yaml").read_text())
    proc = subprocess.run([sys.executable, "-m", "arithrepro.cli", command, "--task", "expr",
                           "lstm-huge-0"], cwd=tmp_path, capture_output=True, text=True)
    assert proc.returncode == 2
    assert proc.stderr.strip() == ("error: params: run lstm-huge-0: not a run of expr in these params "
                                   "(gpt-small-100, gpt-small-101, gpt-small-102, gpt-small-103, "
                                   "gpt-small-104, gpt-medium-100, gpt-medium-101, gpt-medium-102, "
                                   "gpt-medium-103, gpt-medium-104, lstm-small-100, lstm-small-101, ...)")


def test_missing_params_file_is_named(tmp_path):
    with pytest.raises(config.ParamsError, match="nope.yaml: no such params file"):
        config.load(tmp_path / "nope.yaml")


def test_a_tuning_seed_in_a_list_it_tuned_is_refused():
    """No verdict rests on a seed that chose its recipe: the cpu profile's tuning seeds may not
    appear in the seed lists they tuned, and the message names the key and the seed."""
    params = config.compose([])
    assert not set(params["tuning"]["seeds"]) & set(params["expr"]["seeds"])
    with pytest.raises(config.ParamsError,
                       match=r"^expr.seeds = \[3, 100\]: \[3\] is a tuning seed \(tuning.seeds\)"):
        config.compose(["expr.seeds=[3,100]"])
    with pytest.raises(config.ParamsError, match=r"tuning.tuned\[0\] = 'expr.nope.seeds': no such"):
        config.compose(["tuning.tuned=[expr.nope.seeds]"])
    # the source's own settings chose nothing: sanity=source runs the source's seeds 0 and 42
    source = config.compose(["sanity=source"])
    assert source["modular"]["studies"]["sanity"]["seeds"][:2] == [0, 42]
    assert source["modular"]["studies"]["sanity"]["set"]["steps"] == 10001
    assert source["claims"]["targets"] == ["modular-source"]


def test_a_misspelt_key_in_params_gets_the_closest_name():
    params = config.compose(["profile=smoke"], ROOT / "conf")
    params["precison"] = params.pop("precision")
    with pytest.raises(config.ParamsError, match=r"^precison: unknown key \(did you mean precision\?\)"):
        config.validate(params)


def test_a_key_holding_a_newline_is_named_on_one_line():
    params = config.compose(["profile=smoke"], ROOT / "conf")
    params["abacus"]["\n"] = 1
    with pytest.raises(config.ParamsError) as err:
        config.validate(params)
    assert str(err.value).startswith("abacus.'\\n': unknown key") and "\n" not in str(err.value)

"""llm: an LLM on expr's problems through an OpenAI-compatible endpoint."""

from __future__ import annotations

import click

from arithrepro.stages.common import done, friendly_errors, params_option


@click.command("llm")
@params_option
@click.option("--endpoint", required=True, help="A name of llm.at (one of llm.endpoints).")
@friendly_errors
def llm(params_path: str, endpoint: str) -> None:
    """Ask the endpoint every problem of expr's llm.splits (the first llm.limit of each; 0: all)
    with the expr source's protocol, resuming from the answers a run cut short left, and score
    the answers (docs/bench.md, "LLMs on the same problems").

    Reads params: llm.at.<endpoint> (base URL, model, the environment variable holding the
    key), llm.{splits,limit,timeout_s,max_retries,concurrency}; data/expr/. Writes
    runs/expr/llm/<endpoint>/answers.jsonl (kept across runs: every answer as it arrives),
    metrics/expr/llm/<endpoint>.json (accuracy overall, per split and by length; the count of
    right, wrong, malformed, refused, timed-out and failed answers) and
    plots/expr/llm/<endpoint>.csv (accuracy by length).
    """
    from pathlib import Path

    import pandas as pd
    from tqdm import tqdm

    from arithrepro import config
    from arithrepro import llm as ask
    from arithrepro.io import write_frame, write_json
    from arithrepro.provenance import code_root, git_state, params_hash

    params = config.load(params_path)
    p = params["llm"]
    if endpoint not in p["at"]:
        raise config.ParamsError(f"--endpoint = {endpoint!r}: expected one of "
                                 f"{', '.join(p['at'])} (llm.at)")
    target = p["at"][endpoint]
    problems = ask.problems_of(Path("data/expr"), p["splits"], p["limit"])
    client = ask.client_for(target, p["timeout_s"], p["max_retries"])
    folder = Path("runs/expr/llm") / endpoint
    with tqdm(total=len(problems), desc=f"llm {endpoint}", unit="problem",
              dynamic_ncols=True) as bar:
        rows = ask.run(client, target, problems, folder / "answers.jsonl", p["concurrency"],
                       progress=bar.update)
    scores = ask.score(rows)
    record = {"task": "expr", "model": endpoint, "endpoint": {k: target[k] for k in
                                                              ("base_url", "model")},
              **scores,
              "provenance": {"llm": {**git_state(code_root()),
                                     "params_sha256": params_hash({"llm": p, "endpoint": endpoint})}}}
    write_frame(Path("plots/expr/llm") / f"{endpoint}.csv", pd.DataFrame(scores["by_length"]))
    write_json(Path("metrics/expr/llm") / f"{endpoint}.json", record)
    kinds = ", ".join(f"{k} {n}" for k, n in scores["kinds"].items() if n)
    done(f"llm {endpoint} ({target['model']}): {100 * scores['accuracy']:.2f} % of "
         f"{scores['n']} problems ({kinds})")

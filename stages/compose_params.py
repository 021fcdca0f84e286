"""compose-params: write params.yaml from conf/config.yaml, as `dvc exp run` does before it runs.

Not a stage: `dvc repro` reads params.yaml as it is, so after editing conf/config.yaml (or to
switch profiles without an experiment) compose it first, e.g. `arithrepro compose-params
-S profile=paper`.
"""

from __future__ import annotations

import click

from arithrepro.stages.common import done, friendly_errors


@click.command("compose-params")
@click.option("-S", "--set", "overrides", multiple=True, metavar="KEY=VALUE",
              help="An override, as `dvc exp run -S` takes it (repeatable): -S profile=paper "
                   "-S 'abacus.seeds=[0,1]'.")
@click.option("--conf", "conf_dir", default="conf", show_default=True,
              type=click.Path(file_okay=False), help="The Hydra config directory (config.yaml).")
@click.option("--out", "out_path", default="params.yaml", show_default=True,
              type=click.Path(dir_okay=False), help="The params file to write.")
@friendly_errors
def compose_params(overrides: tuple, conf_dir: str, out_path: str) -> None:
    """Compose conf/config.yaml with the -S overrides (Hydra's syntax, as `dvc exp run -S`
    takes them) and write the result to params.yaml, checked first."""
    from arithrepro import config

    params = config.write(out_path, list(overrides), conf_dir)
    done(f"compose-params: profile {params['profile']} -> {out_path}")

"""compose-params: write params.yaml from conf/config.yaml, as `dvc exp run` does before it runs.

Not a stage: `dvc repro` reads params.yaml as it is, so after editing conf/config.yaml (or to
switch profiles without an experiment) compose it first, e.g. `arithrepro compose-params
profile=paper`.
"""

from __future__ import annotations

from pathlib import Path

import click

from arithrepro.stages.common import done, friendly_errors


@click.command("compose-params")
@click.argument("overrides", nargs=-1)
@click.option("--conf", "conf_dir", default="conf", show_default=True,
              type=click.Path(file_okay=False), help="The Hydra config directory (config.yaml).")
@click.option("--out", "out_path", default="params.yaml", show_default=True,
              type=click.Path(dir_okay=False), help="The params file to write.")
@friendly_errors
def compose_params(overrides: tuple, conf_dir: str, out_path: str) -> None:
    """Compose conf/config.yaml with OVERRIDES (Hydra's syntax, as `dvc exp run -S` takes them:
    profile=paper 'abacus.seeds=[0,1]') and write the result to params.yaml, checked first."""
    from arithrepro import config

    compose(Path(conf_dir), Path(out_path), list(overrides))
    params = config.load(out_path)
    done(f"compose-params: profile {params['profile']} -> {out_path}")


def compose(conf_dir: Path, out_path: Path, overrides: list[str]) -> None:
    """DVC's own composition into a temporary file beside out_path, validated, then renamed
    over it: a failed composition leaves params.yaml as it was."""
    import os
    import tempfile

    from arithrepro import config

    if not (conf_dir / "config.yaml").is_file():
        raise FileNotFoundError(f"{conf_dir / 'config.yaml'}: missing (the params' source)")
    from dvc.utils.hydra import compose_and_dump

    fd, tmp = tempfile.mkstemp(dir=out_path.parent, prefix=f".{out_path.name}.", suffix=".yaml")
    os.close(fd)
    tmp = Path(tmp)   # DVC picks its dumper by the suffix
    try:
        try:
            compose_and_dump(tmp, str(conf_dir.resolve()), None, "config", str(Path.cwd()),
                             overrides)
        except Exception as err:  # Hydra's and OmegaConf's errors: a bad override or key
            first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
            raise config.ParamsError(f"{conf_dir / 'config.yaml'} with {' '.join(overrides) or 'no overrides'}: "
                                     f"{first}") from None
        config.load(tmp)
        tmp.replace(out_path)
    finally:
        tmp.unlink(missing_ok=True)

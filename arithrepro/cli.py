"""The `arithrepro` command: one subcommand per DVC stage (see stages/ and dvc.yaml),
and `estimate`, which projects a profile's training time before it runs."""

from __future__ import annotations

import sys
from importlib import import_module

import click

# Subcommands load on use, so `arithrepro --help` does not import torch.
# name -> (module under stages/, function)
COMMANDS = {
    "generate-datasets": ("generate_datasets", "generate_datasets"),
    "train": ("train", "train"),
    "evaluate": ("evaluate", "evaluate"),
    "code-deps": ("code_deps", "code_deps"),
    "report": ("report", "report"),
    "report-bench": ("bench_report", "report_bench"),
    "llm": ("llm", "llm"),
    "serve": ("serve", "serve"),            # not a stage: a trained expr model behind the OpenAI API
    "aggregate-tables": ("aggregate_tables", "aggregate_tables"),
    "results": ("results", "results"),
    "modular-attention": ("modular_attention", "modular_attention"),
    "charlm-corpus": ("charlm_corpus", "charlm_corpus"),
    "charlm-sample": ("charlm_sample", "charlm_sample"),
    "charlm-compute": ("charlm_compute", "charlm_compute"),
    "estimate": ("estimate", "estimate"),   # not a stage: projects each profile's training time
    "exps": ("exps", "exps"),               # not a stage: experiments side by side
    "compose-params": ("compose_params", "compose_params"),   # not a stage: conf/ -> params.yaml
    "pipeline": ("pipeline", "pipeline"),   # not a stage: the registries -> dvc.yaml
    "repro": ("repro", "repro"),            # not a stage: dvc repro, stages side by side
    "crosscheck": ("crosscheck", "crosscheck"),   # not a stage: the findings on another CPU setting
}


class LazyGroup(click.Group):
    def main(self, *args, standalone_mode: bool = True, **extra):
        """As click's, except that a usage error (an unknown option, a bad value) is one line,
        as every other refusal of the command is."""
        if not standalone_mode:
            return super().main(*args, standalone_mode=False, **extra)
        try:
            code = super().main(*args, standalone_mode=False, **extra)
        except click.UsageError as err:
            where = err.ctx.command_path if err.ctx else "arithrepro"
            click.echo(f"error: {' '.join(err.format_message().split())} (`{where} --help`)",
                       err=True)
            sys.exit(err.exit_code)
        except click.ClickException as err:
            err.show()
            sys.exit(err.exit_code)
        except click.Abort:
            click.echo("Aborted!", err=True)
            sys.exit(1)
        sys.exit(code if isinstance(code, int) else 0)

    def list_commands(self, ctx):
        return list(COMMANDS)

    def get_command(self, ctx, name):
        if name not in COMMANDS:
            return None
        module, function = COMMANDS[name]
        return getattr(import_module(f"arithrepro.stages.{module}"), function)


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="arithrepro")
def main() -> None:
    """Re-run and compare published experiments on small sequence models learning arithmetic.

    Each subcommand is one stage of the DVC pipeline in dvc.yaml; `dvc repro` runs them all.
    """


if __name__ == "__main__":
    main()

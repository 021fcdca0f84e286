"""The `arithrepro` command: the commands a user runs (repro, exps, estimate, ...), and one
subcommand per kind of DVC stage (stages/, dvc.yaml), which `dvc repro` runs."""

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
    "render-figures": ("report", "report"),
    "render-figures-bench": ("bench_report", "report_bench"),
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
    "smoke": ("smoke", "smoke"),            # not a stage: the smoke profile in a copy
    "crosscheck": ("crosscheck", "crosscheck"),   # not a stage: the findings on another CPU setting
    "paper-slice": ("paper_slice", "paper_slice"),   # not a stage: the paper profile's GPU slice
}
# how `arithrepro --help` lists them, a line each: what a user runs, then what the pipeline runs
SECTIONS = {
    "Commands": {
        "repro": "run the pipeline (dvc repro), stages side by side",
        "smoke": "the whole pipeline at toy sizes, in a copy of this checkout",
        "exps": "compare experiments: params that differ, headline metrics",
        "estimate": "project a profile's training time on this machine",
        "compose-params": "write params.yaml from conf/ and overrides",
        "crosscheck": "the findings rechecked under another CPU setting",
        "paper-slice": "the paper profile's modular and looped runs, for a GPU",
        "serve": "a trained expr model behind an OpenAI-style endpoint",
    },
    "Pipeline stages (dvc.yaml runs them)": {
        "code-deps": "the code each stage runs, hashed",
        "generate-datasets": "a task's datasets",
        "charlm-corpus": "charlm's corpus and vocabulary",
        "train": "one run, or several as one ensemble",
        "evaluate": "score a trained run",
        "llm": "ask an LLM endpoint expr's problems",
        "render-figures": "a task's tables and figures",
        "render-figures-bench": "the benchmark's task x model grid",
        "modular-attention": "modular's attention maps",
        "charlm-sample": "text sampled from every charlm run",
        "charlm-compute": "charlm's compute table",
        "aggregate-tables": "every task's records in one summary",
        "results": "the results page and the claims' verdicts",
    },
    "Maintenance": {"pipeline": "write dvc.yaml from the registries"},
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
        return [name for names in SECTIONS.values() for name in names]

    def format_commands(self, ctx, formatter):
        for title, lines in SECTIONS.items():
            with formatter.section(title):
                formatter.write_dl(list(lines.items()))

    def get_command(self, ctx, name):
        if name not in COMMANDS:
            return None
        module, function = COMMANDS[name]
        return getattr(import_module(f"arithrepro.stages.{module}"), function)


EXIT_STATUS = ("Exit status: 0 done; 2 refused before any work, the command line or the params "
               "being wrong (an unknown key, value, profile, task, run or stage: one line naming "
               "it); 1 the work stopped (a missing or damaged input, a failed stage, a plan "
               "beyond --max-hours: one line naming the file or the cause).")


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]},
             epilog=EXIT_STATUS)
@click.version_option(package_name="arithrepro")
def main() -> None:
    """Re-run and compare published experiments on small sequence models learning arithmetic.

    Start with `arithrepro repro` (the pipeline, stages side by side) and `arithrepro exps`
    (experiments compared); the pipeline's stages are commands too, which `dvc repro` runs.
    """


if __name__ == "__main__":
    main()

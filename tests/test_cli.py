"""The command's table of contents: every subcommand listed once, a user's before the stages'."""

from click.testing import CliRunner

from arithrepro.cli import COMMANDS, SECTIONS, main


def test_every_command_is_listed_once_under_one_heading():
    listed = [name for lines in SECTIONS.values() for name in lines]
    assert sorted(listed) == sorted(COMMANDS)


def test_help_lists_what_a_user_runs_before_the_stages():
    out = CliRunner().invoke(main, ["--help"]).output
    headings = [out.index(f"{title}:") for title in SECTIONS]
    assert headings == sorted(headings)
    users, stages = out.split("Pipeline stages", 1)
    assert "  repro " in users and "  train " not in users
    assert "  train " in stages and "  repro " not in stages

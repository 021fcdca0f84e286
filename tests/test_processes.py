"""benchmarks/processes.py: every Python process a command starts reports its CPU time and
command, the command's own included."""

import sys

from benchmarks import processes


def test_each_python_process_reports_once_by_command(capsys):
    child = "import subprocess, sys; subprocess.run([sys.executable, '-c', 'pass']); " \
            "subprocess.run([sys.executable, '-c', 'pass'])"
    assert processes.main(["--", sys.executable, "-c", child]) == 0
    out = capsys.readouterr().out
    assert "in 3 Python processes that reported (0 imported torch, 0 torch._dynamo)" in out, out
    by_command = out.split("by command:")[1].split("by test file")[0]
    row = next(line for line in by_command.splitlines() if line.endswith("  -c"))
    assert row.split()[1:4] == ["3", "0", "0"], row


def test_a_failing_command_gives_its_exit_status(capsys):
    assert processes.main(["--", sys.executable, "-c", "raise SystemExit(3)"]) == 3
    assert "exit 3;" in capsys.readouterr().out

"""The README's walkthrough, run as written: every command line of its Walkthrough section in a
fresh directory, in order, each with the exit status (and error code) the README gives it, then
its Python example exactly as pasted."""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import cvmvm
from cvmvm.cli.demo import export
from cvmvm.cli.main import main

REPO = Path(__file__).resolve().parent.parent
README = (REPO / "README.md").read_text(encoding="utf-8")
EXPECT = re.compile(r"#\s*exit (\d+)(?::\s*([a-z]+\.[a-z_]+))?")


def section(title: str) -> str:
    return README.split(f"\n## {title}\n", 1)[1].split("\n## ", 1)[0]


def blocks(text: str, lang: str) -> list[str]:
    return re.findall(rf"```{lang}\n(.*?)```", text, flags=re.S)


def commands(title: str = "Walkthrough") -> list[tuple[list[str], str | None, int, str | None]]:
    """(argv, file stdout goes to, exit status, error code) for each command line of a section."""
    found = []
    for block in blocks(section(title), "sh"):
        for line in block.replace("\\\n", " ").splitlines():
            if not line.strip():
                continue
            command, _, comment = line.partition("  #")
            expect = EXPECT.search("#" + comment) if comment else None
            words = shlex.split(command)
            assert words[0] == "cvmvm", line
            out = None
            if ">" in words:
                out = words[words.index(">") + 1]
                words = words[:words.index(">")]
            found.append((words[1:], out, int(expect.group(1)) if expect else 0, expect and expect.group(2)))
    return found


def test_the_walkthrough_covers_every_command_and_mistake():
    ran = {argv[0] for argv, *_ in commands() if argv and not argv[0].startswith("-")}
    table = set(re.findall(r"^\| `cvmvm ([a-z-]+)", section("Command line"), flags=re.M))
    assert table - ran == set(), f"commands of the README table the walkthrough never runs: {table - ran}"
    codes = {code for *_, code in commands() if code}
    assert {"usage.command", "usage.argument", "usage.conflict", "malformed.kind"} <= codes


def run_commands(title: str, tmp_path: Path, capsys) -> None:
    for argv, out, status, code in commands(title):
        got = main(argv)
        captured = capsys.readouterr()
        where = f"`cvmvm {shlex.join(argv)}`"
        if code is None:
            assert got == status, f"{where} exited {got}, the README says {status}:\n{captured.err}"
        else:
            assert got == status and captured.err.startswith(f"cvmvm: error {code}: "), \
                f"{where} exited {got} with {captured.err!r}; the README says exit {status}, {code}"
            assert captured.err.count("\n") == 1, f"{where}: more than one line on stderr: {captured.err!r}"
        if out is not None:
            (tmp_path / out).write_text(captured.out)


def test_the_walkthrough_names_the_current_trace_root(tmp_path):
    """check-step --root names the root of digits.cvm on image0.npy: it changes when the hashes do."""
    model_path, image_path, _ = export(str(tmp_path))
    root = cvmvm.load(model_path).run({"data": np.load(image_path)}, trace=True).trace.root.hex()
    assert f"--root {root}" in section("Walkthrough"), f"update the README walkthrough's --root to {root}"


def test_the_walkthrough_runs_as_written(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    run_commands("Walkthrough", tmp_path, capsys)
    # The Python example, as pasted, in the directory the commands left behind.
    (example,) = blocks(section("Python interface"), "python")
    exec(compile(example, "README.md (Python interface)", "exec"), {"__name__": "__readme__"})
    assert "malformed.kind" in capsys.readouterr().out


def test_the_onnx_example_runs(tmp_path, monkeypatch, capsys):
    """From a checkout (its fixtures), with x.npy made as the README's comment says."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "fixtures").symlink_to(REPO / "fixtures")
    np.save(tmp_path / "x.npy", np.load(REPO / "fixtures" / "onnx" / "digits" / "test.npy")[:1])
    run_commands("Importing ONNX models", tmp_path, capsys)


def test_the_installed_command_runs(tmp_path):
    """One line through the real entry point: help, then a usage error without a traceback."""
    proc = subprocess.run([sys.executable, "-m", "cvmvm", "--help"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and "show" in proc.stdout and "usage: cvmvm" in proc.stdout
    proc = subprocess.run([sys.executable, "-m", "cvmvm", "run", "--input", "x.npy", "m.cvm"],
                          capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert proc.returncode == 2 and proc.stderr.startswith("cvmvm: error usage.argument: ")
    assert proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr


@pytest.mark.parametrize("argv", [["--help"], ["run", "--help"], ["store", "add", "--help"]])
def test_help_still_prints_help(capsys, argv):
    with pytest.raises(SystemExit) as e:
        main(argv)
    assert e.value.code == 0 and capsys.readouterr().out.startswith("usage: cvmvm")

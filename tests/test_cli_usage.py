"""Command-line mistakes are usage errors (exit 2, one line, --json honoured), --version, Ctrl-C,
and messages that say what is wrong in words."""

from __future__ import annotations

import ast
import importlib.metadata
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from isa.errors import MAX_MESSAGE
import cvmvm
from cvmvm.cli import interrupts, main as cli_main
from cvmvm.cli.common import EXIT_CODES
from cvmvm.cli.interrupts import EXIT_INTERRUPTED, EXIT_TERMINATED
from cvmvm.cli.main import main
from tests import interrupt
from tests.conftest import cvmvm_json

ROOT = "93bd626ef64c8395f12e585f0d678bd3076f723729c6c4187384cc9d1df6bc4a"

MISTAKES = [
    ([], "usage.command"),
    (["--json"], "usage.command"),
    (["frobnicate"], "usage.command"),
    (["--version", "verify", "{d}/digits.cvm"], "usage.argument"),
    (["verify"], "usage.argument"),
    (["verify", "{d}/digits.cvm", "--frobnicate"], "usage.argument"),
    (["verify", "{d}/digits.cvm", "--ops-limit", "-5"], "usage.argument"),
    (["verify", "{d}/digits.cvm", "--ops-limit", "0"], "usage.argument"),
    (["verify", "{d}/digits.cvm", "--ops-limit", "many"], "usage.argument"),
    (["verify", "{d}/digits.cvm", "--ops-limit", "\u0661\u0662\u0663\u0664\u0665\u0666"], "usage.argument"),  # int() reads them
    (["verify", "{d}/digits.cvm", "--memory-limit", "\u0661\u0662G"], "usage.argument"),
    (["verify", "{d}/digits.cvm", "--work-limit", "\u0661e9"], "usage.argument"),
    (["hash", "{d}/image0.npy", "--precision", "0"], "usage.argument"),
    (["hash", "{d}/image0.npy", "--precision", "33"], "usage.argument"),
    (["verify", "{d}/digits.cvm", "--params", "{d}/digits.params"], "usage.conflict"),
    (["run", "{d}/digits.cvm", "--input", "{d}/image0.npy"], "usage.argument"),
    (["run", "{d}/digits.cvm", "--input", "=x.npy"], "usage.argument"),
    (["run", "{d}/digits.cvm", "--input", "data="], "usage.argument"),
    (["run", "{d}/digits.cvm", "--input", "data={d}/image0.npy", "--input", "data={d}/image1.npy"], "usage.argument"),
    (["run", "{d}/digits.cvm", "--input", "data={d}/image0.npy", "--sign", "{d}/missing.key"], "usage.conflict"),
    (["run", "{d}/digits.cvm", "--input", "data={d}/image0.npy", "--trace-format", "jsonl"], "usage.conflict"),
    (["run", "{d}/digits.cvm", "--input", "data={d}/image0.npy", "--trace", "t", "--trace-format", "xml"],
     "usage.argument"),
    (["convert", "{d}/digits.cvm", "{d}/x.json", "--params", "{d}/digits.params"], "usage.conflict"),
    (["convert", "{d}/digits.json", "{d}/x.cvm", "--params", "{d}/digits.params", "--params-out", "p"],
     "usage.conflict"),
    (["hash", "{d}/image0.npy", "--params", "{d}/digits.params"], "usage.conflict"),
    (["disasm", "{d}/digits.cvm", "--dot", "--json"], "usage.conflict"),
    (["store"], "usage.argument"),
    (["store", "frob", "{d}/models"], "usage.argument"),
    (["check-step", "{d}/step3.proof", "--root", "xyz"], "usage.argument"),
    (["check-step", "{d}/step3.proof", "--root", ROOT[:-2]], "usage.argument"),
    (["check-step", "{d}/step3.proof"], "usage.argument"),
    (["check-step", "{d}/step3.proof", "--root", ROOT, "--model", "{d}/digits.cvm", "--program-root", ROOT],
     "usage.conflict"),
    (["check-step", "{d}/step3.proof", "--root", ROOT], "usage.conflict"),
    (["prove-step", "{d}/digits.cvm", "--input", "data={d}/image0.npy", "--step", "1", "--calldata", "c"],
     "usage.conflict"),
    (["prove-step", "{d}/digits.cvm", "--input", "data={d}/image0.npy", "--out", "p"], "usage.conflict"),
    (["check-step", "{d}/step3.proof", "--root", ROOT, "--params", "{d}/digits.params"], "usage.conflict"),
    (["prove-step", "{d}/digits.cvm", "--input", "data={d}/image0.npy", "--step", "-1", "--out", "p"],
     "usage.argument"),
    (["replay", "{d}/one.txs", "--store", "{d}/models", "--workers", "0"], "usage.argument"),
    (["replay", "{d}/one.txs", "--store", "{d}/models", "--batch", "0"], "usage.argument"),
    (["replay", "{d}/one.txs"], "usage.argument"),
    # Defect: values past what the process takes were internal.bug (OverflowError), after
    # --output had written its header.
    (["replay", "{d}/one.txs", "--store", "{d}/models", "--workers", str(2**31), "--output", "{d}/r.jsonl"],
     "usage.argument"),
    (["replay", "{d}/one.txs", "--store", "{d}/models", "--workers", "1025"], "usage.argument"),
    (["prove-outputs", "{d}/digits.cvm", "--against", "t.json", "--calldata", "c", "--commitment-id", str(2**256)],
     "usage.argument"),
    (["prove-step", "{d}/digits.cvm", "--input", "data={d}/image0.npy", "--step", "1", "--element", "0",
      "--calldata", "c", "--commitment-id", str(2**256)], "usage.argument"),
    (["tx", "demo", str(10**7 + 1), "{d}/demo"], "usage.argument"),
    # Defect: '' was the current directory (Path('')), or a ValueError for keygen.
    (["keygen", ""], "usage.argument"),
    (["contract", ""], "usage.argument"),
    (["demo", "--export", ""], "usage.argument"),
    (["store", "add", "", "{d}/digits.cvm"], "usage.argument"),
    (["store", "list", ""], "usage.argument"),
    (["tx", "demo", "5", ""], "usage.argument"),
]


def test_a_refused_replay_writes_no_results(capsys, demo_files):
    main(["replay", f"{demo_files}/one.txs", "--store", f"{demo_files}/models", "--workers", str(2**31),
          "--output", f"{demo_files}/r.jsonl"])
    assert not os.path.exists(f"{demo_files}/r.jsonl")


def test_the_largest_commitment_id_is_taken(capsys, demo_files, tmp_path):
    argv = ["prove-step", f"{demo_files}/digits.cvm", "--input", f"data={demo_files}/image0.npy", "--step", "1",
            "--element", "0", "--calldata", str(tmp_path / "c.hex"), "--commitment-id", str(2**256 - 1)]
    assert main(argv) == 0
    assert "f" * 64 in (tmp_path / "c.hex").read_text()


@pytest.mark.parametrize("argv, code", MISTAKES)
def test_every_mistake_is_one_usage_line(capsys, demo_files, argv, code):
    argv = [a.format(d=demo_files) for a in argv]
    assert main(argv) == EXIT_CODES["usage"]
    captured = capsys.readouterr()
    assert captured.err.count("\n") == 1 and captured.err.startswith(f"cvmvm: error {code}: ")
    assert captured.out == "" or json.loads(captured.out)["error"] == code
    assert "usage:" not in captured.err  # not argparse's usage dump
    if "--json" not in argv:
        status, info = cvmvm_json(capsys, argv)
        assert status == EXIT_CODES["usage"] and info["error"] == code and info["message"]


def test_json_before_or_after_the_command(capsys, demo_files):
    for argv in (["--json", "hash", str(demo_files / "digits.cvm")], ["hash", str(demo_files / "digits.cvm"), "--json"],
                 ["--json", "store", "list", str(demo_files / "models")]):
        assert main(argv) == 0
        assert isinstance(json.loads(capsys.readouterr().out), dict)


def test_version(capsys):
    assert main(["--version"]) == 0
    text = capsys.readouterr().out
    assert text.startswith(f"cvmvm {cvmvm.__version__}\n") and "ISA version" in text and "step proof" in text
    code, info = cvmvm_json(capsys, ["--version"])
    assert code == 0 and info == cvmvm.versions()


# -- a bug is one line too -------------------------------------------------------------------

class _Unprintable(Exception):
    def __str__(self) -> str:
        raise ValueError("no message")


BUGS = [
    (ZeroDivisionError("division by zero"), "ZeroDivisionError: division by zero"),
    # Defect: printed as it came, over two lines (and a message quoting an array, however long).
    (RuntimeError("first\nsecond"), "RuntimeError: first\\nsecond"),
    (ValueError("v" * 100_000), None),
    # A message that cannot be made: its type still names the bug, and no traceback follows.
    (_Unprintable(), "_Unprintable: (its message cannot be shown)"),
]


@pytest.mark.parametrize("bug, message", BUGS, ids=["plain", "two-lines", "long", "unprintable"])
@pytest.mark.parametrize("as_json", [False, True], ids=["text", "json"])
def test_any_other_exception_is_one_internal_bug_line(capsys, monkeypatch, demo_files, bug, message, as_json):
    def broken(argv):
        raise bug
    monkeypatch.setattr(cli_main, "_run", broken)
    argv = ["verify", str(demo_files / "digits.cvm")] + (["--json"] if as_json else [])
    assert main(argv) == EXIT_CODES["internal"] == 7
    captured = capsys.readouterr()
    assert captured.err.count("\n") == 1 and captured.err.startswith("cvmvm: error internal.bug: ")
    shown = captured.err[len("cvmvm: error internal.bug: "):-1]
    assert shown.isprintable() and len(shown) <= MAX_MESSAGE
    assert shown == message if message is not None else shown.startswith("ValueError: vvv")
    if as_json:
        assert json.loads(captured.out) == {"error": "internal.bug", "message": shown}
    else:
        assert captured.out == ""


def test_memory_exhausted_outside_a_run_is_a_limit(capsys, monkeypatch, demo_files):
    """Reading or decoding a file that the host cannot hold: limit.memory (exit 6), not a bug."""
    def exhausted(argv):
        raise MemoryError
    monkeypatch.setattr(cli_main, "_run", exhausted)
    assert main(["verify", str(demo_files / "digits.cvm")]) == EXIT_CODES["limit"]
    assert capsys.readouterr().err.startswith("cvmvm: error limit.memory: out of memory")


# -- Ctrl-C ----------------------------------------------------------------------------------

def test_an_interrupt_is_one_line(capsys, monkeypatch, demo_files):
    def interrupted(argv):
        raise KeyboardInterrupt
    monkeypatch.setattr(cli_main, "_run", interrupted)
    assert main(["verify", str(demo_files / "digits.cvm")]) == EXIT_INTERRUPTED
    assert capsys.readouterr().err == "cvmvm: interrupted\n"


def test_sigterm_is_one_line_and_exit_143(capsys, monkeypatch, demo_files):
    """kill, timeout, systemd and docker stop send SIGTERM: it unwinds as Ctrl-C does (temporary
    files removed, pools ended), with its own line and code; the handler is the default again after."""
    def terminated(argv):
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(10)   # the handler raises at the next bytecode, long before this ends
        raise AssertionError("SIGTERM was not handled")
    monkeypatch.setattr(cli_main, "_run", terminated)
    assert main(["verify", str(demo_files / "digits.cvm")]) == EXIT_TERMINATED
    assert capsys.readouterr().err == "cvmvm: terminated\n"
    assert signal.getsignal(signal.SIGTERM) == signal.SIG_DFL


def test_a_host_programs_sigterm_handler_is_left_alone(capsys, monkeypatch, demo_files):
    seen = []
    previous = signal.signal(signal.SIGTERM, lambda signum, frame: seen.append(signum))
    try:
        assert main(["verify", str(demo_files / "digits.cvm")]) == 0
        assert signal.getsignal(signal.SIGTERM) is not interrupts.terminate
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(0.01)
        assert seen == [signal.SIGTERM]
    finally:
        signal.signal(signal.SIGTERM, previous)


def test_ctrl_c_while_a_command_waits_prints_no_traceback(demo_files, tmp_path):
    """The command blocks waiting for its output directory's lock (cvmvm.files: a fifo as input is
    refused, never read); SIGINT then ends it with one line and leaves no temporary file."""
    import fcntl
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    holder = os.open(out_dir, os.O_RDONLY | os.O_DIRECTORY)
    fcntl.flock(holder, fcntl.LOCK_EX)
    try:
        proc = subprocess.Popen([sys.executable, "-m", "cvmvm", "run", str(demo_files / "digits.cvm"),
                                 "--input", f"data={demo_files / 'image0.npy'}", "--trace", str(out_dir / "t.json")],
                                stderr=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                                preexec_fn=interrupt.foreground)
        deadline = time.monotonic() + 60

        def waiting() -> bool:   # it has the directory open: it waits for the lock
            try:
                fds = os.listdir(f"/proc/{proc.pid}/fd")
                return any(os.readlink(f"/proc/{proc.pid}/fd/{fd}") == str(out_dir) for fd in fds)
            except OSError:
                return False
        while not waiting():
            assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
            time.sleep(0.01)
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    finally:
        os.close(holder)
    assert proc.returncode == EXIT_INTERRUPTED
    assert err == "cvmvm: interrupted\n" and out == ""
    assert list(out_dir.iterdir()) == []


# A signal sent to itself when the command's modules begin to load numpy, the moment a user's
# Ctrl-C most likely lands, as the console script starts (sys.argv as it sets it).  The import
# turns an exception raised inside it into an ImportError, as numpy's C extension does with an
# interrupt during its load (seen with real Ctrl-C: "Importing the numpy C-extensions failed").
WHILE_LOADING = """
import os, signal, sys, time
class SignalOnNumpy:
    def find_spec(self, name, path=None, target=None):
        if name == "numpy":
            try:
                for signum in {signals}:
                    os.kill(os.getpid(), signum)
                    time.sleep(0.2)   # a handler that raises does so here
            except KeyboardInterrupt as e:
                raise ImportError("numpy could not load") from e
        return None
sys.meta_path.insert(0, SignalOnNumpy())
sys.argv = ["cvmvm", "--version"]
from cvmvm.cli.launch import main
assert "numpy" not in sys.modules
sys.exit(main())
"""


def run_loading(*signums: int) -> subprocess.CompletedProcess[str]:
    script = WHILE_LOADING.format(signals=[int(s) for s in signums])
    return subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120,
                          preexec_fn=interrupt.foreground)


@pytest.mark.parametrize("signum, code, line", [(signal.SIGINT, EXIT_INTERRUPTED, "cvmvm: interrupted"),
                                                (signal.SIGTERM, EXIT_TERMINATED, "cvmvm: terminated")])
def test_a_signal_while_the_command_loads_is_held_then_one_line(signum, code, line):
    """Held until the modules have loaded, then reported."""
    proc = run_loading(signum)
    assert (proc.returncode, proc.stderr, proc.stdout) == (code, line + "\n", "")


def test_a_second_signal_while_loading_is_not_held():
    """A load that never ends still gives way to Ctrl-C pressed twice (here, as a library that
    turns an interrupt into its own error would, with that error)."""
    proc = run_loading(signal.SIGINT, signal.SIGINT)
    assert proc.returncode == 1 and "ImportError: numpy could not load" in proc.stderr


def test_a_signal_after_the_command_ends_keeps_its_exit_code():
    """Once main has returned, Python's shutdown put SIGINT back to its default (and SIGTERM was
    already): a signal in those tens of ms ended the process by the signal, with no line and the
    command's code lost.  They are ignored once the command is over."""
    script = ("import os, signal, sys, time; sys.argv = ['cvmvm', '--version']; "
              "from cvmvm.cli.launch import main; code = main(); "
              "os.kill(os.getpid(), signal.SIGINT); os.kill(os.getpid(), signal.SIGTERM); time.sleep(0.1); "
              "sys.exit(code)")
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120,
                          preexec_fn=interrupt.foreground)
    assert (proc.returncode, proc.stderr) == (0, "") and proc.stdout.startswith("cvmvm ")


def test_held_keeps_signals_it_does_not_own():
    """held() records only under the handlers it would replace: an ignored SIGINT stays ignored,
    and a host program's SIGTERM handler stays in place."""
    seen = []
    before = signal.signal(signal.SIGINT, signal.SIG_IGN), signal.signal(signal.SIGTERM, lambda n, f: seen.append(n))
    try:
        with interrupts.held() as came:
            os.kill(os.getpid(), signal.SIGINT)
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(0.05)
        assert came == [] and seen == [signal.SIGTERM] and signal.getsignal(signal.SIGINT) == signal.SIG_IGN
    finally:
        signal.signal(signal.SIGINT, before[0])
        signal.signal(signal.SIGTERM, before[1])


def test_the_console_script_loads_nothing_before_its_handlers():
    """What the console script and ``python -m cvmvm`` import before ``launch.main`` runs: the
    standard library only (the package's API loads on first use)."""
    probe = ("import sys; import cvmvm.cli.launch; "
             "print(sorted(m for m in ('numpy', 'isa', 'serializer', 'msgpack', 'cvmvm.vm.api') if m in sys.modules))")
    proc = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, check=True)
    assert proc.stdout == "[]\n"
    (script,) = importlib.metadata.entry_points(group="console_scripts", name="cvmvm")
    assert script.value == "cvmvm.cli.launch:main"
    assert "from cvmvm.cli.launch import main\n" in (Path(cvmvm.__file__).parent / "__main__.py").read_text("utf-8")


def test_the_package_api_loads_on_first_use():
    assert cvmvm.Model is cvmvm.vm.api.Model and cvmvm.CvmError.__module__ == "isa.errors"
    assert set(cvmvm.__all__) <= set(dir(cvmvm))
    with pytest.raises(AttributeError, match="no attribute 'frobnicate'"):
        getattr(cvmvm, "frobnicate")


def test_the_package_api_is_typed_as_it_loads():
    """The names imported for type checkers (``if TYPE_CHECKING:``) are the names the package loads
    on first use, each from the same module: a name in one list only would lose its type, or be
    typed from elsewhere."""
    tree = ast.parse((Path(cvmvm.__file__)).read_text("utf-8"))
    (block,) = [node for node in tree.body if isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING"]
    typed = {alias.asname or alias.name: node.module for node in block.body if isinstance(node, ast.ImportFrom)
             for alias in node.names}
    assert typed == cvmvm._API


# -- messages --------------------------------------------------------------------------------

def test_truncation_offsets_are_within_the_file(capsys, demo_files, tmp_path):
    data = (demo_files / "digits.cvm").read_bytes()
    for cut in (7, 100, len(data) // 2, len(data) - 1):
        (tmp_path / "t.cvm").write_bytes(data[:cut])
        code, info = cvmvm_json(capsys, ["verify", str(tmp_path / "t.cvm")])
        assert info["error"] == "malformed.native"
        numbers = [int(n) for n in re.findall(r"byte (\d+)", info["message"])]
        assert numbers and max(numbers) <= cut, info["message"]


def test_a_missing_params_file_is_named(capsys, demo_files):
    code, info = cvmvm_json(capsys, ["verify", str(demo_files / "digits.json")])
    assert info["error"] == "invalid.graph" and "no params file was given" in info["message"]


def test_checks_are_explained_in_words(capsys, demo_files):
    code, info = cvmvm_json(capsys, ["check-receipt", str(demo_files / "run0.receipt"), "--model",
                                     str(demo_files / "digits.cvm"), "--input", f"data={demo_files / 'image1.npy'}"])
    assert code == 1
    details = {f["field"]: f["detail"] for f in info["fields"]}
    assert details["inputs"].startswith("input data commits to ") and "the receipt claims" in details["inputs"]
    assert details["output_hash"].startswith("the receipt claims ")
    assert main(["check-receipt", str(demo_files / "run0.receipt"), "--model", str(demo_files / "digits.cvm"),
                 "--input", f"data={demo_files / 'image1.npy'}"]) == 1
    text = capsys.readouterr().out
    assert "{'" not in text and "[{" not in text
    code, info = cvmvm_json(capsys, ["check-step", str(demo_files / "step3.proof"), "--root", "00" * 32,
                                     "--model", str(demo_files / "digits.cvm")])
    assert code == 5 and info["error"] == "input.not_included" and "trace root" in info["message"]


def test_a_step_out_of_range_states_the_range(capsys, demo_files, tmp_path):
    code, info = cvmvm_json(capsys, ["prove-step", str(demo_files / "digits.cvm"), "--input",
                                     f"data={demo_files / 'image0.npy'}", "--step", "13", "--out", str(tmp_path / "p")])
    assert info["error"] == "input.step" and "0 to 12" in info["message"]


def test_clipping_is_reported_on_stderr(capsys, demo_files, tmp_path):
    np.save(tmp_path / "bright.npy", np.load(demo_files / "image0.npy") * 4)
    assert main(["run", str(demo_files / "digits.cvm"), "--input", f"data={tmp_path / 'bright.npy'}"]) == 0
    err = capsys.readouterr().err
    assert err.startswith("cvmvm: warning: input data: ") and "clipped to [-127, 127]" in err
    code, info = cvmvm_json(capsys, ["run", str(demo_files / "digits.cvm"), "--input", f"data={tmp_path / 'bright.npy'}"])
    (c,) = info["clipped"]
    assert c["input"] == "data" and c["count"] > 0 and c["bound"] == 127 and c["high"] == 4 * 127
    code, info = cvmvm_json(capsys, ["run", str(demo_files / "digits.cvm"), "--input", f"data={demo_files / 'image0.npy'}"])
    assert info["clipped"] == [] and capsys.readouterr().err == ""

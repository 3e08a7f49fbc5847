"""Replay on a real Ray cluster on this machine: a head with no CPUs and two worker raylets
with small object stores, all on loopback (ray.cluster_utils.Cluster).  Outcomes are
identical to the in-process replay, also when a worker node dies mid-run; a worker that
cannot import cvmvm fails the replay at once with one clear error; Ctrl-C of `replay --ray`
leaves no Ray process behind.  About a minute of CI, most of it Ray starting."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

# Ray replaces a loopback address by the machine's own (reachable from other machines) unless
# told that this is no real cluster: read when ray is imported, so set first.  It keeps every
# node of these tests, and every connection, on loopback.
LOOPBACK_ENV = {"RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0"}
os.environ.update(LOOPBACK_ENV)

ray = pytest.importorskip("ray", reason="the ray extra is not installed (pip install 'cvmvm[ray]')")
from ray.cluster_utils import Cluster  # noqa: E402

from isa.errors import CvmError  # noqa: E402
from cvmvm.tx import schedule  # noqa: E402
from cvmvm.tx.store import Store  # noqa: E402
from tests import interrupt  # noqa: E402
from tests.test_receipt import REPO  # noqa: E402
from tests.test_replay_cli import repeated  # noqa: E402

LOOPBACK = "127.0.0.1"
OBJECT_STORE = 80 << 20


@pytest.fixture(scope="module")
def demo(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("raydemo")
    run = subprocess.run([sys.executable, "-m", "cvmvm", "tx", "demo", "3000", str(out), "--unsigned"],
                         capture_output=True, text=True, cwd=REPO, timeout=300)
    assert run.returncode == 0, run.stderr
    return out


@pytest.fixture(scope="module")
def cluster():
    c = Cluster(initialize_head=True, head_node_args={
        "num_cpus": 0, "object_store_memory": OBJECT_STORE, "include_dashboard": False,
        "node_ip_address": LOOPBACK})
    workers = [c.add_node(num_cpus=1, object_store_memory=OBJECT_STORE, node_ip_address=LOOPBACK)
               for _ in range(2)]
    c.wait_for_nodes()
    try:
        yield c, workers
    finally:
        ray.shutdown()
        c.shutdown()


def _replay(demo: Path, **kw) -> list:
    opts = schedule.Options(batch_size=64, **kw)
    return [o for burst in schedule.replay_file(demo / "txs.cvmtx", Store(demo / "store"), opts) for o in burst]


def test_a_worker_without_cvmvm_fails_at_once_with_one_error(demo, cluster, tmp_path):
    c, _ = cluster
    shadow = tmp_path / "shadow"
    shadow.mkdir()
    # The workers' Python, started with this on its path, finds no cvmvm however it looks.
    (shadow / "sitecustomize.py").write_text(
        "import sys\n"
        "class NoCvmvm:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name.split('.')[0] in ('cvmvm', 'isa', 'serializer'):\n"
        "            raise ModuleNotFoundError(f'No module named {name!r}', name=name)\n"
        "sys.meta_path.insert(0, NoCvmvm())\n")
    ray.init(address=c.address, logging_level="ERROR", log_to_driver=False,
             runtime_env={"env_vars": {"PYTHONPATH": str(shadow)}})
    try:
        start = time.monotonic()
        with pytest.raises(CvmError) as e:
            _replay(demo, ray=c.address)
        assert e.value.code == "usage.ray_worker" and "cannot import cvmvm" in e.value.message
        assert time.monotonic() - start < 60
    finally:
        ray.shutdown()


def test_rays_error_messages_go_to_stderr_not_into_the_report(demo, cluster, capsys):
    """Ray's driver printed "A worker died or was killed ..." (the task then retried) on stdout,
    inside `replay --json`'s report.  While a replay's own Ray runs, they reach stderr."""
    from ray._private import worker as ray_worker
    c, _ = cluster
    original = ray_worker.print_to_stdstream
    executor = schedule.Ray(Store(demo / "store"), schedule.Options(batch_size=64, ray=c.address))
    try:
        assert executor.started
        ray_worker.print_to_stdstream({"lines": ["A worker died or was killed"], "pid": "raylet", "is_err": False},
                                      ignore_prefix=False)
        out, err = capsys.readouterr()
        assert "A worker died" not in out and "A worker died" in err
    finally:
        executor.close()
    assert ray_worker.print_to_stdstream is original


def test_a_cluster_gives_the_in_process_outcomes_even_when_a_node_dies(demo, cluster):
    """Last on the cluster: it leaves one worker node."""
    c, workers = cluster
    reference = _replay(demo)
    ray.init(address=c.address, logging_level="ERROR", log_to_driver=False)
    try:
        assert ray.cluster_resources()["CPU"] == 2
        assert _replay(demo, ray=c.address) == reference
        # Kill a worker node (not gracefully) mid-run: its tasks run again on the other node.
        got = []
        opts = schedule.Options(batch_size=64, ray=c.address)
        for burst in schedule.replay_file(demo / "txs.cvmtx", Store(demo / "store"), opts):
            got += burst
            if len(workers) == 2 and len(got) >= 500:
                c.remove_node(workers.pop(), allow_graceful=False)
        assert len(workers) == 1 and got == reference
    finally:
        ray.shutdown()


def _descendants(root: int) -> set[int]:
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                parent = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
            children.setdefault(parent, []).append(int(entry.name))
    found, todo = set(), [root]
    while todo:
        for child in children.get(todo.pop(), []):
            found.add(child)
            todo.append(child)
    return found


def test_ctrl_c_of_replay_on_a_local_ray_leaves_no_ray_process(demo, tmp_path):
    big = repeated(demo, tmp_path / "big", 30)   # long enough to be interrupted
    out = tmp_path / "r.jsonl"
    env = {**{k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}, **LOOPBACK_ENV}
    proc = subprocess.Popen([sys.executable, "-m", "cvmvm", "replay", str(big / "txs.cvmtx"), "--store",
                             str(big / "store"), "--batch", "8", "--output", str(out), "--ray"],
                            cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            start_new_session=True, env=env, preexec_fn=interrupt.foreground)
    seen: set[int] = set()
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline and proc.poll() is None and not (out.exists() and
                                                                       out.read_bytes().count(b"\n") > 100):
        seen |= _descendants(proc.pid)
        time.sleep(0.05)
    seen |= _descendants(proc.pid)
    assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
    os.killpg(proc.pid, signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130 and "Traceback" not in err and err.strip().endswith("cvmvm: interrupted"), err[-3000:]
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and any(Path(f"/proc/{p}").exists() for p in seen):
        time.sleep(0.2)
    left = [p for p in seen if Path(f"/proc/{p}").exists()]
    assert seen and not left, [Path(f"/proc/{p}/cmdline").read_bytes()[:100] for p in left]

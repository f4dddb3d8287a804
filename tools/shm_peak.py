"""The peak of /dev/shm one chapter's processes hold, measured while nbval runs it.

A shared hub's ``/dev/shm`` is one tmpfs for every participant: chapter 5's DataLoader workers
hand batches to the kernel through it, and chapters 9, 9b and 10's Triton Python backend passes
every request's tensors through regions there. ``df /dev/shm`` would count other users' files
too, so this reads the chapter's own: every ``/dev/shm`` mapping in ``/proc/<pid>/maps`` of the
pytest process and everything it starts (the kernel, its workers, the servers), each shared
object counted once (by inode; unlinked ones too, as PyTorch's are), sampled every 0.1 s.

    python tools/shm_peak.py notebooks/05_parallelism.ipynb ... --json shm.json  # measure
    python tools/shm_peak.py --record shm.json        # into results/reference/chapter_times.json

Each notebook runs cold in quick mode (``COURSE_COLD_START=1``, as ``make test`` runs it). The
recorded peaks (``quick_shm``) give the workshop's hub its ``/dev/shm`` total
(``tools/chapter_times.py``).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
from helpers.core.process_memory import Sampler  # noqa: E402 - the course's one sampling thread

__all__ = ["shm_mapped", "measure", "record", "main"]
TIMES = ROOT / "results" / "reference" / "chapter_times.json"


def _tree(pid: int) -> list[int]:
    import psutil

    try:
        proc = psutil.Process(pid)
        return [pid, *(p.pid for p in proc.children(recursive=True))]
    except psutil.Error:
        return []


def shm_mapped(pids: list[int], maps: dict[int, str] | None = None) -> int:
    """Bytes of /dev/shm objects mapped by ``pids``, each object (inode) counted once at the
    largest extent any process maps. ``maps`` replaces ``/proc/<pid>/maps`` (tests)."""
    sizes: dict[str, int] = {}
    for pid in pids:
        if maps is not None:
            text = maps.get(pid, "")
        else:
            try:
                text = Path(f"/proc/{pid}/maps").read_text()
            except OSError:
                continue
        for line in text.splitlines():
            fields = line.split(maxsplit=5)
            if len(fields) < 6 or not fields[5].startswith("/dev/shm/"):
                continue
            start, end = (int(x, 16) for x in fields[0].split("-"))
            key = f"{fields[3]}:{fields[4]}"  # device:inode
            sizes[key] = max(sizes.get(key, 0), end - start)
    return sum(sizes.values())


class ShmPeak(Sampler):
    """The largest :func:`shm_mapped` of process ``pid``'s tree, sampled every 0.1 s."""

    def __init__(self, pid: int) -> None:
        super().__init__(0.1)
        self.pid, self.peak = pid, 0

    def sample(self) -> None:
        self.peak = max(self.peak, shm_mapped(_tree(self.pid)))


def measure(notebook: Path, timeout_s: int = 1800) -> dict[str, object]:
    """Run ``notebook`` under nbval (quick mode, cold start) and sample its /dev/shm peak."""
    env = dict(
        os.environ,
        COURSE_MODE="quick",
        COURSE_COLD_START="1",
        PYTHONHASHSEED="0",
        OMP_WAIT_POLICY="PASSIVE",
    )
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(notebook)]
    cmd += ["--nbval-lax", "--nbval-cell-timeout=900"]
    t0 = time.perf_counter()
    proc = subprocess.Popen(
        cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
    )
    with ShmPeak(proc.pid) as shm:
        try:
            out, _ = proc.communicate(timeout=timeout_s)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    return {
        "notebook": notebook.stem,
        "passed": proc.returncode == 0,
        "seconds": round(time.perf_counter() - t0, 1),
        "shm_peak_mib": round(shm.peak / 2**20, 1),
        "tail": out.decode(errors="replace").strip().splitlines()[-1:],
    }


def record(measured: Path, times: Path = TIMES) -> dict[str, object]:
    """Put the passing chapters' peaks of a ``--json`` file into the times file (``quick_shm``)."""
    run = json.loads(measured.read_text())
    passed = {k: r["shm_peak_mib"] for k, r in run["chapters"].items() if r["passed"]}
    if not passed:
        raise ValueError(f"{measured}: no chapter passed")
    data = json.loads(times.read_text())
    data["quick_shm"] = {
        "mib": dict(sorted(passed.items())),
        "date": run["date"],
        "machine": run["machine"],
        "how": run["what"],
    }
    times.write_text(json.dumps(data, indent=1) + "\n")
    return data["quick_shm"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("notebooks", nargs="*", type=Path)
    parser.add_argument("--json", type=Path, help="write the results here")
    parser.add_argument("--record", type=Path, help="record a --json file's peaks")
    args = parser.parse_args(argv)
    if args.record:
        print(json.dumps(record(args.record), indent=1))
        return 0
    from helpers.core.hardware import machine_facts

    runs = []
    for nb in args.notebooks:
        runs.append(measure(nb))
        print(json.dumps(runs[-1]))
    out = {
        "what": "peak /dev/shm mapped by one chapter's process tree, quick mode, cold start, nbval",
        "machine": machine_facts(),
        "date": datetime.now(timezone.utc).strftime("%Y-%m-%d"),
        "loadavg_after": round(os.getloadavg()[0], 2),
        "chapters": {r["notebook"]: r for r in runs},
    }
    if args.json:
        args.json.write_text(json.dumps(out, indent=1) + "\n")
    return 0 if all(r["passed"] for r in runs) else 1


if __name__ == "__main__":
    raise SystemExit(main())

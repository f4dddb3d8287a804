"""helpers.core.worker_pool: the guard against starting workers from a script's top level."""

from __future__ import annotations

import os
import subprocess
import sys


def test_unguarded_top_level_call_is_found_and_a_guarded_one_is_not(tmp_path):
    script = tmp_path / "job.py"
    script.write_text(
        "from helpers.core.worker_pool import unguarded_main_call\n"
        "print('top', unguarded_main_call())\n"
        "def f():\n"
        "    return unguarded_main_call()\n"
        "if __name__ == '__main__':\n"
        "    print('guarded', unguarded_main_call(), f())\n"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    out = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, env=env, check=True
    ).stdout.splitlines()
    assert out == [f"top {script}:2", "guarded None None"]

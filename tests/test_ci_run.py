"""What .ci/run's own options do to a test run, on a throwaway suite of a few files."""

from __future__ import annotations

import os
import re
import shlex
import signal
import subprocess
import sys
from pathlib import Path

from tests.workflow_copies import REPO

CRASHING_FILE = """\
import os
import signal
import time


def test_before():
    time.sleep(1.5)


def test_crash():
    os.kill(os.getpid(), signal.SIGSEGV)


def test_after():
    pass
"""


def ci_pytest_options() -> list[str]:
    """The options of .ci/run's pytest command, without its test folder."""
    script = (REPO / ".ci" / "run").read_text().replace("\\\n", " ")
    command = re.search(r"^python -m pytest (.+?) +tests ", script, re.M)
    assert command, ".ci/run has no `python -m pytest ... tests` line"
    return shlex.split(command.group(1))


def test_a_crashed_test_worker_ends_the_run_instead_of_hanging_it(tmp_path: Path):
    """pytest-xdist 3.8.0 with --dist loadfile puts a crashed worker's finished files back in the
    queue; its replacement then gets a file with nothing left to run and waits forever (upstream
    issue #1378), so a segfault on some CPU kind would hang CI until its time limit. With no
    replacement (--max-worker-restart 0) the run ends and names the crash."""
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    for name in "abcde":
        (tmp_path / f"test_{name}.py").write_text("def test_one():\n    pass\n")
    (tmp_path / "test_z_crash.py").write_text(CRASHING_FILE)
    process = subprocess.Popen(
        [sys.executable, "-m", "pytest", *ci_pytest_options(), "-p", "no:cacheprovider", "."],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    try:
        output, _ = process.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.communicate()
        raise AssertionError("the test run hung after its worker crashed") from None
    assert process.returncode == 1, output
    assert "crashed while running 'test_z_crash.py::test_crash'" in output, output
    assert "1 failed, 6 passed" in output, output

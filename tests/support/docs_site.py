"""The documentation site, built once per test run for tests/test_docs.py and
tests/test_docs_screenshot.py.

The first test that asks for it starts ``sphinx-build -W --keep-going`` in the
background (so the build overlaps the examples tests/test_docs.py runs); every
other test, in this process or in another pytest-xdist worker of the same run,
waits for that same build.  The build lives under the run's shared base
temporary directory and is claimed with an exclusive create, so the site is
built once whatever the workers.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
#: Seconds the build may take (it takes about one minute on one busy core).
BUILD_TIMEOUT = 300

# Runs the build, then writes its exit status to a file (written whole, by a
# rename), so that a test in another process can wait for it.
_RUNNER = """
import os, subprocess, sys
status, log, timeout, cwd, *cmd = sys.argv[1:]
with open(log, "w") as out:
    try:
        rc = subprocess.run(cmd, stdout=out, stderr=subprocess.STDOUT, timeout=float(timeout), cwd=cwd).returncode
    except subprocess.TimeoutExpired:
        out.write(f"\\nthe build took more than {timeout} s\\n")
        rc = -1
with open(status + ".tmp", "w") as f:
    f.write(str(rc))
os.replace(status + ".tmp", status)
"""


@dataclass(frozen=True)
class Site:
    """One build of the site: ``out`` holds the HTML once :meth:`wait` returns 0."""

    root: Path

    @property
    def out(self) -> Path:
        return self.root / "html"

    @property
    def log(self) -> Path:
        return self.root / "build.log"

    @property
    def status(self) -> Path:
        return self.root / "status"

    def wait(self, timeout: float = BUILD_TIMEOUT + 30) -> tuple[int, str]:
        """The build's exit status and its output, once it has ended."""
        deadline = time.monotonic() + timeout
        while not self.status.exists():
            if time.monotonic() > deadline:
                pytest.fail(f"the docs build did not end within {timeout} s ({self.root})")
            time.sleep(0.2)
        log = self.log.read_text(errors="replace") if self.log.exists() else ""
        return int(self.status.read_text()), log

    def built(self) -> Path:
        """The HTML directory; fails the test when the build did not succeed."""
        rc, log = self.wait()
        assert rc == 0, log[-5000:]
        return self.out


_started: subprocess.Popen[bytes] | None = None


def site(tmp_path_factory: pytest.TempPathFactory) -> Site:
    """The run's build of the site, started now unless it already was."""
    global _started
    base = tmp_path_factory.getbasetemp()
    shared = base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base
    the_site = Site(shared / "refwire-docs-site")
    the_site.root.mkdir(exist_ok=True)
    try:
        os.close(os.open(the_site.root / "claimed", os.O_CREAT | os.O_EXCL | os.O_WRONLY))
    except FileExistsError:
        return the_site
    cmd = [sys.executable, "-m", "sphinx", "-W", "--keep-going", "-q", "-b", "html", str(DOCS), str(the_site.out)]
    _started = subprocess.Popen(
        [sys.executable, "-c", _RUNNER, str(the_site.status), str(the_site.log), str(BUILD_TIMEOUT), str(ROOT), *cmd],
        start_new_session=True,
    )
    return the_site


def stop(the_site: Site) -> None:
    """At the end of the session: a build this process started and that is
    still running is killed (its status says so, for whoever waits)."""
    global _started
    if _started is None:
        return
    if _started.poll() is None:
        try:
            os.killpg(_started.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        _started.wait(timeout=30)
        if not the_site.status.exists():
            the_site.log.write_text("the build was stopped at the end of the test session\n")
            the_site.status.write_text("-9")
    _started = None

"""peers/build.sh's source paths other than the snapshot: a ``git clone`` of
the URL at the commit (``REFWIRE_PEER_<NAME>_URL``/``_COMMIT``), and the exit
status 3 when there is no source at all.

The public host is not reachable where these tests run, so the clone is
exercised against a local git repository made from the go-lumber snapshot
(file:// URL): the same commands a user's machine runs against GitHub.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tarfile
from pathlib import Path

import pytest
from real_peers import BUILD, NO_SOURCE, ROOT, run, timeout_for

pytestmark = [pytest.mark.peers, pytest.mark.timeout(timeout_for("go-lumber"))]

SOURCES = Path(os.environ.get("REFWIRE_PEER_SOURCES") or ROOT.parent / "shared" / "peer-sources")
ARCHIVE = SOURCES / "go-lumber-360407d.tar.gz"


def _git(*args: str, cwd: Path) -> str:
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t"}
    return subprocess.run(["git", *args], cwd=cwd, env=env, check=True, capture_output=True, text=True).stdout.strip()


def _build(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return run(["env", *(f"{k}={v}" for k, v in env.items()), "bash", str(BUILD), "go-lumber"], timeout_for("go-lumber"))


@pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")
def test_a_clone_of_the_url_at_the_commit_builds(go_lumber_peer: object, tmp_path: Path) -> None:
    """The clone path, against a local repository holding the snapshot's tree."""
    if not ARCHIVE.is_file():
        pytest.skip(f"no snapshot {ARCHIVE} to make a local repository from")
    repo = tmp_path / "go-lumber.git"
    repo.mkdir()
    with tarfile.open(ARCHIVE) as tar:
        tar.extractall(repo, filter="data")
    (top,) = list(repo.iterdir())  # `git archive --prefix=go-lumber/`
    for p in top.iterdir():
        p.rename(repo / p.name)
    top.rmdir()
    _git("init", "-q", cwd=repo)
    _git("add", "-A", cwd=repo)
    _git("commit", "-q", "-m", "snapshot", cwd=repo)
    commit = _git("rev-parse", "HEAD", cwd=repo)
    cache = tmp_path / "cache"
    env = {"REFWIRE_PEER_CACHE": str(cache), "REFWIRE_PEER_GO_LUMBER_URL": f"file://{repo}", "REFWIRE_PEER_GO_LUMBER_COMMIT": commit}
    done = _build(env)
    assert done.returncode == 0, done.stderr[-2000:]
    built = Path(done.stdout.strip().splitlines()[-1])
    assert built.parent == cache and built.name.startswith(f"go-lumber-{commit[:12]}-")
    assert {"ljserver", "ljclient"} <= {p.name for p in (built / "bin").iterdir()}
    info = (built / "build-info.txt").read_text()
    assert f"commit: {commit}" in info and f"source: git file://{repo}" in info
    assert "source from git clone" in done.stderr
    # a commit the repository does not have is an error naming it, not a build of something else
    missing = "0" * 40
    bad = _build({**env, "REFWIRE_PEER_GO_LUMBER_COMMIT": missing})
    assert bad.returncode not in (0, NO_SOURCE) and missing in bad.stderr, bad.stderr[-2000:]


def test_no_source_at_all_is_exit_3(tmp_path: Path) -> None:
    """No snapshot and a URL that cannot be fetched: exit 3 (the tests skip then, CI or not)."""
    env = {
        "REFWIRE_PEER_CACHE": str(tmp_path / "cache"),
        "REFWIRE_PEER_SOURCES": str(tmp_path / "none"),
        "REFWIRE_PEER_GO_LUMBER_URL": f"file://{tmp_path / 'no-such-repo'}",
    }
    done = _build(env)
    assert done.returncode == NO_SOURCE, (done.returncode, done.stderr[-2000:])
    assert "no source for go-lumber" in done.stderr
    assert not list((tmp_path / "cache").glob("go-lumber-*"))  # nothing half-built left in the cache


def test_a_commit_that_is_no_full_id_is_refused(tmp_path: Path) -> None:
    done = _build({"REFWIRE_PEER_CACHE": str(tmp_path / "cache"), "REFWIRE_PEER_GO_LUMBER_COMMIT": "360407d"})
    assert done.returncode == 1 and "must be a full commit id" in done.stderr, done.stderr

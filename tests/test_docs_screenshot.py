"""The built site as a reader sees it: headless Chromium (Debian's ``chromium``).

* The front page and one guide are screenshotted at 1280x800 (PNG files in the
  test's temporary directory; with ``REFWIRE_SCREENSHOTS=DIR`` a copy goes to DIR
  too, to look at).
* On the front page, the links to the four tutorials (the conformance tester's,
  the fault injector's, the porter's and the embedder's) are inside the first
  screen of the page's own text: a copy of the page with a small script appended
  writes each link's ``getBoundingClientRect()`` into the DOM, which
  ``chromium --dump-dom`` prints.

The site is the one tests/test_docs.py builds (tests/support/docs_site.py: one
build per run).  Without Chromium the tests skip, saying so; every browser run
is bounded by a timeout and its whole process group is killed after it.
"""

from __future__ import annotations

import html
import json
import os
import re
import shutil
import signal
import struct
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from support import docs_site
from support.docs_site import Site

WIDTH, HEIGHT = 1280, 800
TUTORIALS = ("tutorials/conform.html", "tutorials/chaos.html", "tutorials/porting.html", "tutorials/embedding.html")
GUIDE = "guides/chaos.html"
BROWSER_TIMEOUT = 60


def _chromium() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable"):
        if found := shutil.which(name):
            return found
    return None


CHROMIUM = _chromium()
pytestmark = pytest.mark.skipif(
    CHROMIUM is None,
    reason="no headless Chromium on PATH (Debian: apt-get install chromium; scripts/test.sh installs it when run as root)",
)


@pytest.fixture(scope="session")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Site]:
    the_site = docs_site.site(tmp_path_factory)
    yield the_site
    docs_site.stop(the_site)


@pytest.fixture
def built(site: Site) -> Path:
    rc, _ = site.wait()
    if rc != 0:
        pytest.skip("the docs build failed (tests/test_docs.py::test_docs_build_without_warnings says why)")
    return site.out


def browse(args: list[str], profile: Path) -> str:
    """Run headless Chromium with ``args``; its stdout.  Killed (with every
    process it started) after :data:`BROWSER_TIMEOUT` seconds."""
    assert CHROMIUM is not None
    cmd = [
        CHROMIUM,
        "--headless",
        "--no-sandbox",  # (root, in a container)
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--no-first-run",
        "--hide-scrollbars",
        f"--user-data-dir={profile}",
        f"--window-size={WIDTH},{HEIGHT}",
        *args,
    ]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        out, err = proc.communicate(timeout=BROWSER_TIMEOUT)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        pytest.fail(f"chromium took more than {BROWSER_TIMEOUT} s: {' '.join(cmd)}")
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)  # a renderer left behind
        except ProcessLookupError:
            pass
    assert proc.returncode == 0, err[-3000:]
    return out


def png_size(path: Path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and data[12:16] == b"IHDR", f"{path} is not a PNG"
    width, height = struct.unpack(">II", data[16:24])
    return width, height


@pytest.mark.parametrize("page", ["index.html", GUIDE])
def test_screenshot(built: Path, page: str, tmp_path: Path) -> None:
    assert (built / page).is_file(), page
    png = tmp_path / (page.replace("/", "-").removesuffix(".html") + ".png")
    browse([f"--screenshot={png}", (built / page).as_uri()], tmp_path / "profile")
    assert png_size(png) == (WIDTH, HEIGHT)
    assert png.stat().st_size > 20_000, "an almost empty screenshot (a blank page?)"
    if copy_to := os.environ.get("REFWIRE_SCREENSHOTS"):
        Path(copy_to).mkdir(parents=True, exist_ok=True)
        shutil.copy(png, Path(copy_to) / png.name)


# Appended to a copy of the page: runs once the page's stylesheets are in (a
# parser-inserted script waits for them), after layout.
MEASURE = """<script>
(function () {
  var links = [];
  document.querySelectorAll("article a[href]").forEach(function (a) {
    var r = a.getBoundingClientRect();
    links.push({href: a.getAttribute("href"), top: r.top, bottom: r.bottom, width: r.width, height: r.height,
                visible: getComputedStyle(a).visibility !== "hidden"});
  });
  var out = document.createElement("pre");
  out.id = "refwire-measure";
  out.textContent = JSON.stringify({width: innerWidth, height: innerHeight, links: links});
  document.body.appendChild(out);
})();
</script>"""


def measure(built: Path, page: str, tmp_path: Path) -> dict[str, object]:
    """The links of ``page``'s text, as laid out in a 1280x800 window."""
    source = (built / page).read_text(encoding="utf-8")
    # The copy lives in the test's directory (the site stays as built, for the
    # other tests); <base> makes its relative links and assets the page's own.
    base = f'<base href="{(built / page).parent.as_uri()}/">'
    head = source.index("<head>") + len("<head>")
    end = source.rindex("</body>")
    probe = tmp_path / "measure.html"
    probe.write_text(source[:head] + base + source[head:end] + MEASURE + source[end:], encoding="utf-8")
    dom = browse(["--dump-dom", probe.as_uri()], tmp_path / "profile")
    found = re.search(r'<pre id="refwire-measure">(.*?)</pre>', dom, re.S)
    assert found, dom[-2000:]
    result: dict[str, object] = json.loads(html.unescape(found.group(1)))
    return result


def test_the_four_tutorials_are_on_the_first_screen(built: Path, tmp_path: Path) -> None:
    layout = measure(built, "index.html", tmp_path)
    assert layout["width"] == WIDTH, layout["width"]
    screen = layout["height"]
    assert isinstance(screen, (int, float)) and 400 < screen <= HEIGHT, screen
    links = layout["links"]
    assert isinstance(links, list)
    for tutorial in TUTORIALS:
        placed = [link for link in links if link["href"] == tutorial]
        assert placed, f"the front page's text does not link {tutorial}"
        first = min(placed, key=lambda link: link["top"])
        assert first["visible"] and first["width"] > 0 and first["height"] > 0, first
        assert 0 <= first["top"] and first["bottom"] <= screen, (
            f"{tutorial}: its first link on the front page is at y={first['top']:.0f}..{first['bottom']:.0f},"
            f" below the first screen ({screen} px high)"
        )

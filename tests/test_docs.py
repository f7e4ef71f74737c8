"""The documentation builds, its examples run, and its links and references hold.

* ``docs/`` (Sphinx, furo: the tutorials and guides, the CLI reference, the specs
  and the API reference) builds warning-free: ``sphinx-build -W --keep-going -b
  html docs OUT``.  No network: no intersphinx.
* Every Python example of the guides and tutorials is a file in ``docs/examples/``
  included with ``literalinclude``, and runs unmodified in its own interpreter,
  with a time limit (as tests/test_readme_examples.py does for the README).
* In the built site every relative link reaches an existing file and every
  ``#fragment`` an id of its page; every command of ``refwire`` and every option
  has its entry in the CLI reference; every spec page offers its vector files;
  every public module of ``refwire`` has its ``automodule``; every relative link
  of README.md names an existing file, and a page of the manual it names is built.

The build (tests/support/docs_site.py) runs in a subprocess started when the
first test of this module starts, so it overlaps the examples; the tests that
read the site wait for it.  tests/test_docs_screenshot.py uses the same build.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pytest
from support import docs_site
from support.docs_site import Site

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
EXAMPLES = DOCS / "examples"
# Run by another example, with arguments (conform_client.py runs it once per case).
HELPERS = {"my_client.py"}
RUNNABLE = sorted(p.name for p in EXAMPLES.glob("*.py") if p.name not in HELPERS)


def _env() -> dict[str, str]:
    """The examples call ``refwire`` by name, as a user would: put this
    interpreter's scripts directory first on PATH."""
    env = dict(os.environ)
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    return env


@pytest.fixture(scope="session")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Site]:
    the_site = docs_site.site(tmp_path_factory)
    yield the_site
    docs_site.stop(the_site)


@pytest.fixture(autouse=True)
def _start_the_build(site: Site) -> None:
    """Every test of this module starts the build (the first one really does)."""


def test_every_example_is_in_a_guide() -> None:
    included = set()
    for page in DOCS.rglob("*.rst"):
        for target in re.findall(r"^\.\. literalinclude:: (\S+)", page.read_text(), re.M):
            path = (page.parent / target).resolve()
            assert path.is_file(), f"{page.relative_to(ROOT)}: {target} does not exist"
            included.add(path.name)
    assert set(RUNNABLE) | HELPERS <= included, sorted((set(RUNNABLE) | HELPERS) - included)
    assert len(RUNNABLE) >= 8


def test_the_guides_have_no_inline_python() -> None:
    """Python in a guide or a tutorial is a file of docs/examples/ (which runs), never a block of text."""
    for page in [*(DOCS / "guides").rglob("*.rst"), *(DOCS / "tutorials").rglob("*.rst")]:
        text = page.read_text()
        assert not re.search(r"^\.\. (code-block|code|sourcecode):: (python|pycon)", text, re.M), page.name


@pytest.mark.parametrize("name", RUNNABLE)
def test_example_runs(name: str, tmp_path: Path) -> None:
    out = subprocess.run(
        [sys.executable, str(EXAMPLES / name)], capture_output=True, text=True, timeout=60, cwd=tmp_path, env=_env()
    )
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-3000:]


def test_docs_build_without_warnings(site: Site) -> None:
    out = site.built()
    pages = {p.relative_to(out).as_posix() for p in out.rglob("*.html")}
    for page in ("index.html", "api/shared.html", "api/lumberjack.html", "guides/conform.html", "guides/embedding.html"):
        assert page in pages, sorted(pages)
    # autodoc found the modules (a failed import is a warning, but check the output too)
    assert "LumberjackServer" in (out / "api" / "lumberjack.html").read_text()


# --------------------------------------------------------------------------- built HTML


class _Page(HTMLParser):
    """The ids and the links (``href``, ``src``) of one HTML page, and for the
    CLI reference the options (``.. option::`` names) under each section title."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.ids: set[str] = set()
        self.links: list[str] = []
        self.options: dict[str, list[str]] = {}  # section title -> option names
        self.entries: dict[str, int] = {}  # section title -> number of option entries
        self.titles: set[str] = set()
        self._sections: list[str] = []  # titles of the open <section>s ("" until its heading)
        self._stack: list[str] = []  # open tags, for the sections' and headings' ends
        self._heading: list[str] | None = None
        self._descname: list[str] | None = None
        self._depth_descname = 0

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = {k: v or "" for k, v in attrs}
        for key in ("id", "name") if tag == "a" else ("id",):
            if a.get(key):
                self.ids.add(a[key])
        for key in ("href", "src"):
            if key in a and tag in ("a", "link", "img", "script", "iframe"):
                self.links.append(a[key])
        if tag in VOID:
            return
        self._stack.append(tag)
        if tag == "section":
            self._sections.append("")
        elif re.fullmatch(r"h[1-6]", tag) and self._sections and not self._sections[-1]:
            self._heading = []
        elif tag == "dt" and "sig" in a.get("class", "").split() and self._sections:
            self.entries[self._sections[-1]] = self.entries.get(self._sections[-1], 0) + 1
        elif tag == "span" and "descname" in a.get("class", "").split():
            self._descname, self._depth_descname = [], len(self._stack)

    def handle_endtag(self, tag: str) -> None:
        if tag in VOID or tag not in self._stack:
            return
        while self._stack:
            open_tag = self._stack.pop()
            if self._descname is not None and len(self._stack) < self._depth_descname:
                if self._sections:
                    self.options.setdefault(self._sections[-1], []).append("".join(self._descname))
                self._descname = None
            if re.fullmatch(r"h[1-6]", open_tag) and self._heading is not None:
                self._sections[-1] = "".join(self._heading).replace("\N{PILCROW SIGN}", "").strip()
                self.titles.add(self._sections[-1])
                self._heading = None
            if open_tag == "section" and self._sections:
                self._sections.pop()
            if open_tag == tag:
                break

    def handle_data(self, data: str) -> None:
        if self._heading is not None:
            self._heading.append(data)
        if self._descname is not None:
            self._descname.append(data)


VOID = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source", "track", "wbr"}


def _parse(path: Path) -> _Page:
    page = _Page()
    page.feed(path.read_text(encoding="utf-8"))
    page.close()
    return page


def broken_links(out: Path) -> list[str]:
    """Every relative link of the built site whose file does not exist, or whose
    ``#fragment`` is no id of the page it points to."""
    pages = {path: _parse(path) for path in sorted(out.rglob("*.html"))}
    broken = []
    for path, page in pages.items():
        for link in page.links:
            url = urlsplit(link)
            if url.scheme or url.netloc or link.startswith("//"):
                continue  # not ours to check (and the build needs no network)
            target = (path.parent / unquote(url.path)).resolve() if url.path else path
            where = f"{path.relative_to(out)}: {link}"
            if not target.exists():
                broken.append(f"{where} (no such file)")
                continue
            if url.fragment and target.suffix == ".html":
                ids = pages[target].ids if target in pages else _parse(target).ids
                if unquote(url.fragment) not in ids:
                    broken.append(f"{where} (no id {url.fragment!r} there)")
    return broken


def test_internal_links_and_anchors_resolve(site: Site) -> None:
    broken = broken_links(site.built())
    assert not broken, "\n".join(broken)


def _commands() -> list[tuple[tuple[str, ...], argparse.ArgumentParser]]:
    from refwire.cli import build_parser

    found = []
    todo: list[tuple[tuple[str, ...], argparse.ArgumentParser]] = [((), build_parser())]
    while todo:
        path, parser = todo.pop(0)
        found.append((path, parser))
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                todo += [((*path, name), sub) for name, sub in action.choices.items()]
    return found


def missing_from_cli_reference(out: Path) -> list[str]:
    """Each command (``refwire serve lumberjack``) must be a section of the CLI
    reference (the index for ``refwire`` itself, ``cli/<command>.html`` for the
    rest) with an ``.. option::`` entry for each of its arguments, under every
    option string.  ``-h``/``--help``, which every command has, is said once on
    the index; arguments argparse hides (``help=SUPPRESS``) are not listed."""
    missing = []
    pages: dict[str, _Page] = {}
    for path, parser in _commands():
        page_name = f"cli/{path[0]}.html" if path else "cli/index.html"
        if page_name not in pages:
            if not (out / page_name).is_file():
                missing.append(f"{page_name} (no page)")
                pages[page_name] = _Page()
                continue
            pages[page_name] = _parse(out / page_name)
        page = pages[page_name]
        title = " ".join(("refwire", *path)) if path else "Command-line reference"
        if path and title not in page.titles:
            missing.append(f"{title}: no section in {page_name}")
            continue
        shown = set(page.options.get(title, []))
        arguments = [
            action
            for action in parser._actions
            if not isinstance(action, (argparse._HelpAction, argparse._SubParsersAction)) and action.help != argparse.SUPPRESS
        ]
        for action in arguments:
            for option in action.option_strings:
                if option not in shown:
                    missing.append(f"{title} {option}")
        if page.entries.get(title, 0) != len(arguments):
            missing.append(f"{title}: {page.entries.get(title, 0)} entries for {len(arguments)} arguments")
    if "--help" not in (out / "cli" / "index.html").read_text(encoding="utf-8") if (out / "cli" / "index.html").is_file() else "":
        missing.append("cli/index.html: -h/--help is not mentioned")
    return missing


def test_every_command_and_option_is_in_the_cli_reference(site: Site) -> None:
    missing = missing_from_cli_reference(site.built())
    assert not missing, "\n".join(missing)


def missing_vector_downloads(out: Path) -> list[str]:
    """Each specs/<protocol>/README.md must be a page of the site, with every
    vector file of the protocol linked as a download that exists in the build."""
    missing = []
    for spec in sorted((ROOT / "specs").glob("*/README.md")):
        page = out / "specs" / f"{spec.parent.name}.html"
        if not page.is_file():
            missing.append(f"specs/{spec.parent.name}/README.md has no page (docs/specs/{spec.parent.name}.md)")
            continue
        links = [urlsplit(link).path for link in _parse(page).links if "_downloads/" in link]
        names = {Path(link).name for link in links if (page.parent / link).is_file()}
        for vectors in sorted((spec.parent / "vectors").glob("*.json")):
            if vectors.name not in names:
                missing.append(f"{page.relative_to(out)}: no download of {vectors.relative_to(ROOT)}")
    return missing


def test_the_spec_pages_offer_their_vectors(site: Site) -> None:
    missing = missing_vector_downloads(site.built())
    assert not missing, missing


# --------------------------------------------------------------------------- sources


def public_modules() -> list[str]:
    """Every module of src/refwire whose dotted name has no part starting with "_"."""
    src = ROOT / "src"
    names = []
    for path in sorted((src / "refwire").rglob("*.py")):
        parts = path.relative_to(src).with_suffix("").parts
        parts = parts[:-1] if parts[-1] == "__init__" else parts
        if not any(part.startswith("_") for part in parts):
            names.append(".".join(parts))
    return names


def undocumented_modules(api: Path = DOCS / "api") -> list[str]:
    documented = set()
    for page in api.glob("*.rst"):
        documented |= set(re.findall(r"^\.\. automodule:: (\S+)", page.read_text(encoding="utf-8"), re.M))
    return [name for name in public_modules() if name not in documented]


def test_every_public_module_is_in_the_api_reference() -> None:
    """A new public module cannot be forgotten: each has an ``.. automodule::``
    in docs/api/ (the build then fails if it cannot be imported)."""
    assert len(public_modules()) > 150
    missing = undocumented_modules()
    assert not missing, missing


_MD_LINK = re.compile(r"\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)|^\s*\[[^\]]+\]:\s*(\S+)|\b(?:href|src)=\"([^\"]+)\"", re.M)


def readme_links(text: str) -> list[str]:
    """The relative link targets of a markdown text (inline, reference-style and
    HTML links), without their ``#fragment``; code spans and blocks skipped."""
    text = re.sub(r"^(```|~~~).*?^\1", "", text, flags=re.M | re.S)
    text = re.sub(r"`[^`\n]*`", "", text)
    targets = []
    for match in _MD_LINK.finditer(text):
        target = next(group for group in match.groups() if group)
        url = urlsplit(target)
        if url.scheme or url.netloc or target.startswith("#"):
            continue
        targets.append(unquote(url.path))
    return targets


def missing_readme_targets(readme: Path = ROOT / "README.md") -> list[str]:
    return [target for target in readme_links(readme.read_text(encoding="utf-8")) if not (readme.parent / target).exists()]


def test_every_file_the_readme_links_exists() -> None:
    assert readme_links("see [the tutorial](docs/tutorials/conform.rst#x) and [site](https://x.org/a)") == ["docs/tutorials/conform.rst"]
    missing = missing_readme_targets()
    assert not missing, missing


def test_every_docs_page_the_readme_links_is_built(site: Site) -> None:
    """A README link to a page of the manual (``docs/....rst``) names a page the
    site builds (not an excluded or misspelt one)."""
    pages = [t for t in readme_links((ROOT / "README.md").read_text(encoding="utf-8")) if t.startswith("docs/") and t.endswith((".rst", ".md"))]
    out = site.built()
    for target in pages:
        html = out / Path(target).relative_to("docs").with_suffix(".html")
        assert html.is_file(), f"README.md links {target}, which the site does not build"

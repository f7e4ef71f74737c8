"""Sphinx directives that generate refwire's reference pages from the code.

``.. refwire-cli:: [COMMAND ...]``
    The CLI reference, read from ``refwire.cli.build_parser()``: with no
    argument, the ``refwire`` command itself (its options and a list of its
    commands); with a command path (``serve``, ``send tank``), that command's
    section and one sub-section per sub-command below it, each with its usage,
    every option (``.. option::`` entries, so ``:option:`refwire serve
    lumberjack --listen``` links to one), its help, choices and default.  Every
    command gets the label ``cli-<path>`` (``cli-serve-lumberjack``).  The build
    warns about a command no directive renders, so a new command cannot be
    left out of the reference.

``.. refwire-vectors:: PROTOCOL``
    A table of ``specs/PROTOCOL/vectors/*.json``: each file as a download, the
    number of vectors it holds, its description and the JSON Schema it follows
    (``specs/schema/``), so a porter can fetch them from the built site.
"""

from __future__ import annotations

import argparse
import builtins
import json
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

from docutils import nodes
from docutils.statemachine import StringList
from sphinx import addnodes
from sphinx.application import Sphinx
from sphinx.environment import BuildEnvironment
from sphinx.transforms.post_transforms import SphinxPostTransform
from sphinx.util import logging
from sphinx.util.docutils import SphinxDirective
from sphinx.util.nodes import nested_parse_with_titles

ROOT = Path(__file__).resolve().parents[2]
SPECS = ROOT / "specs"
_log = logging.getLogger(__name__)

# Section adornments by depth below the directive's first section.
_ADORNMENTS = "=-~^\"'"
_USAGE_WIDTH = 88
_FLAG_ACTIONS = (
    argparse._StoreTrueAction,
    argparse._StoreFalseAction,
    argparse._StoreConstAction,
    argparse._AppendConstAction,
    argparse._CountAction,
)

_parser: argparse.ArgumentParser | None = None


def root_parser() -> argparse.ArgumentParser:
    """``refwire``'s parser, built once per build."""
    global _parser
    if _parser is None:
        from refwire.cli import build_parser

        _parser = build_parser()
    return _parser


def subcommands(parser: argparse.ArgumentParser) -> Iterator[tuple[str, argparse.ArgumentParser, str]]:
    """``(name, parser, help)`` of each sub-command of ``parser``, in the parser's order."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            helps = {a.dest: a.help or "" for a in action._choices_actions}
            for name, sub in action.choices.items():
                yield name, sub, helps.get(name, "")


def walk(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], argparse.ArgumentParser]]:
    """Every command below ``parser`` (itself first), with its path of sub-command names."""
    yield path, parser
    for name, sub, _ in subcommands(parser):
        yield from walk(sub, (*path, name))


def find(path: tuple[str, ...]) -> argparse.ArgumentParser:
    parser = root_parser()
    for word in path:
        found = {name: sub for name, sub, _ in subcommands(parser)}
        if word not in found:
            raise ValueError(f"refwire {' '.join(path)}: no command {word!r} (there are: {', '.join(found)})")
        parser = found[word]
    return parser


def label(path: tuple[str, ...]) -> str:
    return "cli-" + "-".join(path) if path else "cli-refwire"


def escape(text: str) -> str:
    """Plain text as reST: every punctuation character backslash-escaped."""
    return re.sub(r"([!-/:-@\[-`{-~])", r"\\\1", " ".join(text.split()))


def format_default(action: argparse.Action) -> str | None:
    """The default as a reader types it, or None when there is none worth saying."""
    default = action.default
    if default is None or default == argparse.SUPPRESS or isinstance(action, _FLAG_ACTIONS):
        return None
    if isinstance(default, (list, tuple)):
        if not default:
            return None
        if len(default) == 2 and isinstance(default[0], str) and isinstance(default[1], int):
            return f"{default[0]}:{default[1]}"  # a HOST:PORT parsed by argtypes
        return ", ".join(str(item) for item in default)
    if isinstance(default, str) and not default:
        return None
    return str(default)


def help_text(parser: argparse.ArgumentParser, action: argparse.Action) -> str:
    if not action.help:
        return ""
    formatter = parser.formatter_class(prog=parser.prog)
    try:
        return str(formatter._expand_help(action))  # %(default)s and friends
    except (KeyError, TypeError, ValueError):
        return action.help


def usage(parser: argparse.ArgumentParser) -> str:
    formatter_class: Any = parser.formatter_class  # (every HelpFormatter takes a width)
    formatter = formatter_class(prog=parser.prog, width=_USAGE_WIDTH)
    formatter.add_usage(parser.usage, parser._actions, parser._mutually_exclusive_groups)
    return str(formatter.format_help()).strip()


def _literal(text: str) -> str:
    return f":literal:`{escape(text)}`" if text else ""


def command_rst(path: tuple[str, ...], parser: argparse.ArgumentParser, summary: str, depth: int | None) -> list[str]:
    """reST for one command: its section (``depth`` None: no section), description, usage, options."""
    program = " ".join(("refwire", *path))
    lines: list[str] = []
    if depth is not None:
        lines += [f".. _{label(path)}:", "", program, _ADORNMENTS[depth] * len(program), ""]
    for text in (parser.description or summary, parser.epilog):
        if text:
            lines += [escape(text), ""]
    lines += [".. code-block:: text", ""]
    lines += ["   " + line for line in usage(parser).splitlines()]
    lines += ["", f".. program:: {program}", ""]
    subs = list(subcommands(parser))
    for action in parser._actions:
        if isinstance(action, argparse._HelpAction) or action.help == argparse.SUPPRESS:
            continue
        if isinstance(action, argparse._SubParsersAction):
            continue
        formatter = parser.formatter_class(prog=parser.prog)
        lines += [f".. option:: {formatter._format_action_invocation(action)}", ""]
        body = [escape(help_text(parser, action))] if action.help else []
        if action.choices and not isinstance(action.choices, dict):
            body.append("Choices: " + ", ".join(_literal(str(choice)) for choice in action.choices) + ".")
        if action.required and action.option_strings:
            body.append("Required.")
        default = format_default(action)
        if default is not None:
            body.append(f"Default: {_literal(default)}.")
        for paragraph in body:
            lines += ["   " + paragraph, ""]
    if subs:
        lines += ["Commands:", ""]
        for name, _sub, sub_help in subs:
            lines.append(f"* :ref:`refwire {' '.join((*path, name))} <{label((*path, name))}>`" + (f" -- {escape(sub_help)}" if sub_help else ""))
        lines.append("")
    return lines


class CliDirective(SphinxDirective):
    """``.. refwire-cli:: [COMMAND ...]`` (see the module's docstring)."""

    optional_arguments = 10
    has_content = False

    def run(self) -> list[nodes.Node]:
        path = tuple(self.arguments)
        try:
            top = find(path)
        except ValueError as exc:
            raise self.error(str(exc)) from None
        lines: list[str] = []
        rendered: list[tuple[str, ...]] = []
        if not path:
            lines += command_rst((), top, "", None)
            rendered.append(())
        else:
            for sub_path, parser in walk(top, path):
                depth = len(sub_path) - len(path)
                summary = dict((n, h) for n, _, h in subcommands(find(sub_path[:-1])))[sub_path[-1]]
                lines += command_rst(sub_path, parser, summary, depth)
                rendered.append(sub_path)
        paths: dict[str, list[tuple[str, ...]]] = self.env.refwire_cli_paths  # type: ignore[attr-defined]
        paths.setdefault(self.env.docname, []).extend(rendered)
        self.env.note_dependency(str(ROOT / "src" / "refwire" / "cli.py"))
        container = nodes.section() if path else nodes.container()
        nested_parse_with_titles(self.state, StringList(lines, source=f"<refwire-cli {' '.join(path)}>"), container)
        return list(container.children)


def _schema_name(protocol: str, vector_file: Path) -> str:
    return f"{protocol}-{vector_file.stem.replace('_', '-')}.json"


class VectorsDirective(SphinxDirective):
    """``.. refwire-vectors:: PROTOCOL`` (see the module's docstring)."""

    required_arguments = 1
    has_content = False

    def _download(self, path: Path) -> nodes.Node:
        rel = path.relative_to(ROOT).as_posix()
        ref = addnodes.download_reference(
            "",
            "",
            nodes.literal(rel, rel),
            refdoc=self.env.docname,
            refdomain="",
            reftype="download",
            refexplicit=True,
            refwarn=False,
            reftarget="/" + Path("..", rel).as_posix(),  # from the docs source directory
        )
        return ref

    def run(self) -> list[nodes.Node]:
        protocol = self.arguments[0]
        folder = SPECS / protocol / "vectors"
        files = sorted(folder.glob("*.json"))
        if not files:
            raise self.error(f"no vector files in {folder}")
        table = nodes.table(classes=["refwire-vectors"])
        group = nodes.tgroup(cols=4)
        table += group
        for width in (3, 1, 6, 3):
            group += nodes.colspec(colwidth=width)

        def row(*cells: nodes.Node | str) -> nodes.row:
            r = nodes.row()
            for cell in cells:
                entry = nodes.entry()
                entry += nodes.paragraph("", "", cell if isinstance(cell, nodes.Node) else nodes.Text(cell))
                r += entry
            return r

        head = nodes.thead()
        head += row("File", "Vectors", "What it holds", "JSON Schema")
        group += head
        body = nodes.tbody()
        group += body
        for path in files:
            self.env.note_dependency(str(path))
            data: Any = json.loads(path.read_text(encoding="utf-8"))
            vectors = data.get("vectors", []) if isinstance(data, dict) else data
            description = data.get("description", "") if isinstance(data, dict) else ""
            schema = SPECS / "schema" / _schema_name(protocol, path)
            body += row(
                self._download(path),
                str(len(vectors)),
                str(description),
                self._download(schema) if schema.is_file() else "",
            )
        common = SPECS / "schema" / "common.json"
        note = nodes.paragraph()
        note += nodes.Text("The schemas share their definitions in ")
        note += self._download(common)
        note += nodes.Text(
            "; the same files ship inside the package (refwire.specs.vector_files(\"" + protocol + "\"))."
        )
        return [table, note]


def _json_or_json_lines(text: str) -> bool:
    try:
        json.loads(text)
        return True
    except ValueError:
        pass
    try:
        for line in text.splitlines():
            if line.strip():
                json.loads(line)
        return True
    except ValueError:
        return False


def _force_sketch_json(app: Sphinx, doctree: nodes.document) -> None:
    """The specs show the shape of their vector files as JSON with ``...`` for
    what is left out: highlight those blocks as JSON all the same (a code-block's
    ``:force:``) instead of warning that they do not lex.  Real JSON is untouched,
    so a typo in one still warns."""
    if not app.env.docname.startswith("specs/"):
        return
    for block in doctree.findall(nodes.literal_block):
        if block.get("language") == "json" and "..." in block.astext() and not _json_or_json_lines(block.astext()):
            block["force"] = True


# --------------------------------------------------------------------------- autodoc

_documenting: list[str] = []  # the module autodoc is documenting now


def _note_module(app: Sphinx, what: str, name: str, obj: object, options: Any, lines: list[str]) -> None:
    if what == "module":
        _documenting[:] = [name]


def _public_refwire_module(name: str) -> bool:
    parts = name.split(".")
    return parts[0] == "refwire" and not any(part.startswith("_") for part in parts)


def _skip_reexports(app: Sphinx, what: str, name: str, obj: object, skip: bool, options: Any) -> bool | None:
    """A module's member that another public refwire module defines is
    documented there (every public module has its automodule, as
    tests/test_docs.py checks), not once more under each module that re-exports
    it (``refwire.pravega.frames`` re-exports ``refwire.pravega.commands``): one
    description per object, and no "more than one target" for its name.  A
    member its own module does not export stays where it is re-exported."""
    if what != "module" or not _documenting:
        return None
    current = _documenting[0]
    module = sys.modules.get(current)
    if module is None or getattr(module, name, None) is not obj:
        return None  # not a member of the module noted last: no opinion
    defined_in = getattr(obj, "__module__", None)
    if not isinstance(defined_in, str) or defined_in == current or not _public_refwire_module(defined_in):
        return None
    home = sys.modules.get(defined_in)
    exported = getattr(home, "__all__", None)
    if getattr(home, name, None) is obj and (exported is None or name in exported):
        return True  # its own module's automodule documents it
    return None


class _ClosestTarget(SphinxPostTransform):
    """Resolve a Python cross-reference that names several refwire objects (a
    short name in a signature, ``:mod:`.connection``` in a docstring) to the one
    nearest the referring module (``refwire.pravega.cli``'s ``ServerConfig`` is
    ``refwire.pravega.server.ServerConfig``), and leave Python's builtins
    (``type``, ``bytes``) unlinked rather than pointing at an attribute of the
    same name.  A tie still warns."""

    default_priority = 5  # before sphinx's ReferencesResolver (10)

    _FALLBACKS: ClassVar[dict[str, tuple[str, ...]]] = {"class": ("data", "attr"), "attr": ("meth",), "meth": ("_prop",)}

    def run(self, **kwargs: Any) -> None:
        by_last_name: dict[str, int] = {}
        for fullname in self.env.domains["py"].objects:
            last = fullname.rpartition(".")[2]
            by_last_name[last] = by_last_name.get(last, 0) + 1
        for node in list(self.document.findall(addnodes.pending_xref)):
            if node.get("refdomain") == "py" and node.hasattr("refspecific"):  # (an exact name finds one object at most)
                self._resolve(node, by_last_name)

    def _find(self, node: addnodes.pending_xref, objtype: str) -> list[tuple[str, Any]]:
        domain = self.env.domains["py"]
        return list(domain.find_obj(self.env, node.get("py:module"), node.get("py:class"), node["reftarget"], objtype, 1))

    def _resolve(self, node: addnodes.pending_xref, by_last_name: dict[str, int]) -> None:
        bare = node["reftarget"].lstrip(".~")
        last = bare.rpartition(".")[2]
        builtin = "." not in bare and isinstance(getattr(builtins, bare, None), type)
        if by_last_name.get(last, 0) < 2 and not (builtin and last in by_last_name):
            return  # cannot be ambiguous (the cheap test: find_obj scans every object)
        matches = self._find(node, node["reftype"])
        if not matches and builtin:
            # a builtin (``type``, ``bytes``) that only an attribute's name would match
            node.replace_self(node.children[0] if node.children else nodes.Text(bare))
            return
        for fallback in self._FALLBACKS.get(node["reftype"], ()):
            matches = matches or self._find(node, fallback)
        canonical = [match for match in matches if not match[1].aliased]
        if len(canonical) < 2:
            return  # sphinx resolves it (or leaves it unresolved) as it would
        here = (node.get("py:module") or "").split(".")

        def closeness(match: tuple[str, Any]) -> tuple[int, int]:
            parts = match[0].split(".")
            common = 0
            while common < min(len(parts), len(here)) and parts[common] == here[common]:
                common += 1
            return common, -len(parts)

        ranked = sorted(canonical, key=closeness, reverse=True)
        if closeness(ranked[0]) != closeness(ranked[1]):
            node["reftarget"] = ranked[0][0]
            del node["refspecific"]


# --------------------------------------------------------------------------- env


def _env_init(app: Sphinx, env: BuildEnvironment, docnames: Any = None) -> None:
    if not hasattr(env, "refwire_cli_paths"):
        env.refwire_cli_paths = {}  # type: ignore[attr-defined]


def _env_purge(app: Sphinx, env: BuildEnvironment, docname: str) -> None:
    _env_init(app, env)
    env.refwire_cli_paths.pop(docname, None)  # type: ignore[attr-defined]


def _env_merge(app: Sphinx, env: BuildEnvironment, docnames: set[str], other: BuildEnvironment) -> None:
    _env_init(app, env)
    for docname in docnames:
        if docname in other.refwire_cli_paths:  # type: ignore[attr-defined]
            env.refwire_cli_paths[docname] = other.refwire_cli_paths[docname]  # type: ignore[attr-defined]


def _check_every_command(app: Sphinx, env: BuildEnvironment) -> None:
    """Warn (an error under ``-W``) for each command no ``refwire-cli`` directive renders."""
    _env_init(app, env)
    rendered = {p for paths in env.refwire_cli_paths.values() for p in paths}  # type: ignore[attr-defined]
    if not rendered:
        return
    for path, _parser in walk(root_parser()):
        if path not in rendered:
            _log.warning("refwire %s is in no refwire-cli directive (docs/cli/)", " ".join(path), type="refwire", subtype="cli")


def setup(app: Sphinx) -> dict[str, Any]:
    app.add_directive("refwire-cli", CliDirective)
    app.add_directive("refwire-vectors", VectorsDirective)
    app.connect("env-before-read-docs", _env_init)
    app.connect("env-purge-doc", _env_purge)
    app.connect("env-merge-info", _env_merge)
    app.connect("env-check-consistency", _check_every_command)
    app.connect("doctree-read", _force_sketch_json)
    app.connect("autodoc-process-docstring", _note_module)
    app.connect("autodoc-skip-member", _skip_reexports)
    app.add_post_transform(_ClosestTarget)
    return {"version": "1", "parallel_read_safe": True, "parallel_write_safe": True, "env_version": 1}

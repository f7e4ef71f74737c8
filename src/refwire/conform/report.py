"""Reports of a conformance run: ``index.json``, one JSON record per case, a
static HTML matrix with a page per case, and JUnit XML.

Layout of ``--out DIR``::

    DIR/index.json              agent -> case -> verdict, close, matched profiles, seed, replay
    DIR/<agent>/<case>.json     the whole record: expected, observed, frames, keepalives, wire log
    DIR/index.html              agent x case matrix, grouped by category, coloured by verdict
    DIR/<agent>/<case>.html     description, procedure, requirement, expected vs observed, keepalives, wire log
    DIR/junit.xml               one testsuite per category, one testcase per case

The HTML needs no server and no network: plain files with inline CSS, whose
links are relative (a report directory can be moved or uploaded as a CI
artifact).  Case text written with Markdown backticks (`` `W 0` ``) shows as
code; each case page carries a legend of the expectation notation
(``[A 2] then FIN or RST``, ``...``, ``exit [0u]*``).  A testee client's exit
status and the end of its stderr are on its case page and in JUnit's
``system-err``.
"""

from __future__ import annotations

import functools
import json
import os
import re
import urllib.parse
import xml.etree.ElementTree as ET
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from .ids import natural_key
from .model import CaseResult, Verdict
from .runner import RunResult, sort_results, to_index

__all__ = ["FORMATS", "LEGEND", "STDERR_LINES", "code_html", "merge_indexes", "write_html", "write_junit", "write_reports"]

FORMATS = ("json", "html", "junit")

_COLOURS = {
    "PASS": "#2e7d32",
    "NON-STRICT": "#9e9d24",
    "INFO": "#1565c0",
    "UNSUPPORTED": "#757575",
    "SKIPPED": "#bdbdbd",
    "FAIL": "#c62828",
    "ERROR": "#6a1b9a",
}


_CSS = """
body{font-family:system-ui,sans-serif;margin:1.5em;color:#222}
table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:.25em .5em;text-align:left;vertical-align:top}
th.cat{background:#eee}a{color:inherit}.v{color:#fff;font-weight:600;text-align:center}
pre{background:#f6f6f6;padding:.5em;overflow-x:auto;white-space:pre-wrap;word-break:break-all}
.tx{color:#0d47a1}.rx{color:#1b5e20}.action{color:#555}.frame{color:#4a148c}.small{font-size:85%;color:#555}
code{background:#f0f0f0;color:#222;padding:0 .2em;border-radius:3px}.legend dt{font-family:monospace;margin-top:.3em}
"""

#: Lines of a testee's stderr shown on its case page and in JUnit's ``system-err``.
STDERR_LINES = 20

#: How to read Expected and Observed (shown on every case page; the conformance
#: guide says the same).  Backticks become code.
LEGEND: tuple[tuple[str, str], ...] = (
    (
        "`[A 1, A 2]`",
        "what the testee sent, one token per frame, in order (`nothing` or `[]`: no frame); "
        "observed facts (exit status, what the sink received) follow the frames",
    ),
    ("`...`", "any number of tokens, or none"),
    (
        "`*` `?` `[0u]` `[!0]`",
        "wildcards inside a token or a fact, as in shell patterns: any text, one character, one of the characters "
        "listed, any character but those listed; `exit [0u]*` is `exit 0` or `exit unknown`, `exit [!0]*` a non-zero exit status",
    ),
    (
        "`then FIN or RST or open`",
        "how the connection may end: `FIN` the testee closed it, `RST` the testee reset it, `open` the testee kept it "
        "open until the case stopped waiting (`open until refwire reset it`: refwire reset it first), `refused` the "
        "testee never accepted it",
    ),
    ("`(fact; fact)`", "facts the case noted that must all be there"),
    (
        "`PASS for strict: …`",
        "what matching that outcome means for the profiles named (`*`: every profile); FAIL marks a documented bug, "
        "INFO an implementation-defined choice",
    ),
)

_INDEX_SOURCE = """<!doctype html><html><head><meta charset="utf-8"><title>refwire conform: {{ run.protocol }}</title><style>{{ css }}</style></head><body>
<h1>refwire conform {{ run.protocol }} ({{ run.role }} under test)</h1>
{% if runs|length > 1 %}<table class="small"><tr><th>run</th><th>protocol</th><th>role</th><th>agents</th><th>profile</th><th>seed</th><th>run id</th><th>time scale</th></tr>
{% for r in runs %}<tr><td>{{ loop.index }}</td><td>{{ r.protocol }}</td><td>{{ r.role }}</td><td>{{ r.agents|join(", ") }}</td><td>{{ r.profile }}</td><td>{{ r.seed }}</td><td>{{ r.run_id }}</td><td>{{ r.time_scale }}{% if r.interrupted %} · <b>interrupted</b>{% endif %}</td></tr>
{% endfor %}</table><p></p>{% else %}<p class="small">seed {{ run.seed }}{% if run.run_id %} · run id {{ run.run_id }}{% endif %} · profile {{ run.profile }} · time scale {{ run.time_scale }}{% if run.interrupted %} · <b>interrupted</b>{% endif %}</p>{% endif %}
<p>{% for k, n in counts %}<span class="v" style="background:{{ colours[k] }};padding:0 .4em">{{ k }} {{ n }}</span> {% endfor %}</p>
{% if summary %}<table><tr><th>protocol</th><th>role</th>{% for a in agents %}<th>{{ a }}</th>{% endfor %}</tr>
{% for protocol, role, cells in summary %}<tr><td>{{ protocol }}</td><td>{{ role }}</td>{% for c in cells %}<td class="small">{{ c }}</td>{% endfor %}</tr>
{% endfor %}</table><p></p>{% endif %}
<table><tr><th>case</th><th>title</th>{% for a in agents %}<th>{{ a }}</th><th class="small">close</th>{% endfor %}</tr>
{% for cat, rows in categories %}<tr><th class="cat" colspan="{{ 2 + 2 * agents|length }}">{{ cat }}</th></tr>
{% for cid, title, cells in rows %}<tr><td>{{ cid }}</td><td>{{ title|code }}</td>
{% for cell in cells %}{% if cell %}<td class="v" style="background:{{ colours[cell.verdict] }}"><a href="{{ cell.href }}">{{ cell.verdict }}</a>{% if cell.profiles %}<div class="small" style="color:#fff">like {{ cell.profiles }}</div>{% endif %}</td><td class="small">{{ cell.close }}</td>{% else %}<td></td><td></td>{% endif %}{% endfor %}</tr>
{% endfor %}{% endfor %}</table></body></html>
"""

_CASE_SOURCE = """<!doctype html><html><head><meta charset="utf-8"><title>{{ c.id }} {{ c.slug }} - {{ r.agent }}</title><style>{{ css }}</style></head><body>
<p><a href="../index.html">&larr; matrix</a></p>
<h1>{{ c.id }} {{ c.slug }}</h1><h2>{{ c.title|code }}</h2>
<p><span class="v" style="background:{{ colour }};padding:.1em .5em">{{ r.verdict }}</span> agent <b>{{ r.agent }}</b> · profile {{ r.profile }}{% if r.matched_profiles %} · consistent with {{ r.matched_profiles|join(", ") }}{% endif %} · {{ "%.3f"|format(r.duration_s) }} s · case seed {{ r.case_seed }}</p>
{% if r.reason %}<p>{{ r.reason|code }}</p>{% endif %}
<table>
<tr><th>Requirement</th><td>{{ c.requirement }}</td></tr>
<tr><th>Procedure</th><td>{{ c.procedure|code }}</td></tr>
<tr><th>Vectors</th><td>{{ c.vectors|join(", ") }}</td></tr>
<tr><th>Tags</th><td>{{ c.tags|join(", ") }}</td></tr>
<tr><th>Expected</th><td>{% for e in c.expects %}<div>{{ e.verdict }} for {{ e.profiles|join(", ") }}: <code>{{ e.outcome }}</code>{% if e.note %} <span class="small">({{ e.note|code }})</span>{% endif %}</div>{% endfor %}</td></tr>
<tr><th>Observed</th><td>{% if r.observed %}<code>{{ r.observed }}</code>{% endif %}</td></tr>
<tr><th>Close</th><td>{% for k, v in r.close.items() %}{{ k }}={{ v }} {% endfor %}</td></tr>
{% if c.role == "server" %}<tr><th>Keepalives</th><td>{% for k in r.keepalives %}<div>{{ "%.3f"|format(k.t) }} s: {{ k.token }} (version byte '{{ k.version }}'), {{ "%.3f"|format(k.since_batch_s) }} s after {{ k.covers }}</div>{% else %}none{% endfor %}</td></tr>{% endif %}
{% if proc %}<tr><th>Testee process</th><td><code>{{ proc.argv }}</code> · exit status {{ proc.exit }}{% if proc.total %}<div class="small">stderr{% if proc.total > proc.stderr|length %}, last {{ proc.stderr|length }} of {{ proc.total }} lines (the JSON record keeps more){% endif %}:</div><pre>{{ proc.stderr|join("\n") }}</pre>{% else %} · nothing on stderr{% endif %}</td></tr>{% endif %}
<tr><th>Replay</th><td><code>{{ r.replay }}</code></td></tr>
</table>
<details class="small legend" open><summary>How to read Expected and Observed</summary><dl>{% for term, text in legend %}<dt>{{ term|code }}</dt><dd>{{ text|code }}</dd>{% endfor %}</dl></details>
<h3>Wire log</h3><pre>{% for e in log %}<span class="{{ e.cls }}">{{ e.text }}</span>
{% endfor %}</pre></body></html>
"""


@functools.cache
def _templates() -> tuple[Any, Any]:
    """The two page templates, compiled on first use (jinja2 is imported only
    when a report is written, not whenever the command line starts)."""
    import jinja2

    env = jinja2.Environment(autoescape=True, undefined=jinja2.StrictUndefined, trim_blocks=True, lstrip_blocks=True)
    env.filters["code"] = code_html
    return env.from_string(_INDEX_SOURCE), env.from_string(_CASE_SOURCE)


_TICKS = re.compile(r"(`+)([^`]+?)\1")


def code_html(text: object) -> Any:
    """``text`` as HTML, escaped, with Markdown code spans (`` `W 0` ``) as ``<code>``."""
    import markupsafe

    escaped = str(markupsafe.escape(str(text)))
    return markupsafe.Markup(_TICKS.sub(lambda m: f"<code>{m.group(2).strip()}</code>", escaped))


def _log_lines(wire_log: Sequence[Mapping[str, Any]]) -> list[dict[str, str]]:
    out = []
    for i, e in enumerate(wire_log):
        t = f"{i:04d} {e.get('t', 0.0):9.4f}s"
        kind = e.get("kind")
        if kind in ("tx", "rx"):
            hexs = str(e.get("hex", ""))
            wrapped = "\n".join(" " * 20 + hexs[k : k + 96] for k in range(0, len(hexs), 96)).lstrip()
            more = " …" if e.get("truncated") else ""
            out.append({"cls": kind, "text": f"{t} {kind.upper()} {e.get('len')} bytes: {wrapped}{more}"})
        elif kind == "frame":
            fields = {k: v for k, v in e.items() if k not in ("kind", "t", "dir", "token")}
            out.append(
                {"cls": "frame", "text": f"{t} FRAME {e.get('dir', '')} {e.get('token')} {json.dumps(fields, default=str)}"}
            )
        elif kind == "rx-close":
            out.append({"cls": "rx", "text": f"{t} RX CLOSE {e.get('how')}"})
        elif kind == "process":
            status = "was killed" if e.get("exit") is None else f"exited {e.get('exit')}"
            out.append({"cls": "action", "text": f"{t} PROCESS {_argv(e.get('argv'))} {status} (stderr: see Testee process)"})
        else:
            text = str(e.get("text", ""))
            if e.get("traceback"):
                text += "\n" + str(e["traceback"])
            out.append({"cls": "action", "text": f"{t} ACTION {text}"})
    return out


def _argv(argv: object) -> str:
    import shlex

    if isinstance(argv, (list, tuple)):
        return shlex.join(str(a) for a in argv)
    return str(argv or "")


def _process(r: CaseResult) -> dict[str, Any] | None:
    """What a case page shows of the testee process: argv, exit, stderr's last lines."""
    proc = r.testee_process()
    if proc is None:
        return None
    tail, total = r.testee_stderr(STDERR_LINES)
    status = "none (killed)" if proc.get("exit") is None else str(proc.get("exit"))
    return {"argv": _argv(proc.get("argv")), "exit": status, "stderr": tail, "total": total}


def _href(reportfile: str, out: Path) -> str:
    """A case page's link from ``out/index.html``: relative, whatever the index says
    (``conform matrix`` records where each run's pages are as absolute paths)."""
    if not reportfile:
        return ""
    target = reportfile[: -len(".json")] + ".html" if reportfile.endswith(".json") else reportfile
    if os.path.isabs(target):
        target = os.path.relpath(target, os.path.abspath(out))
    return urllib.parse.quote(Path(target).as_posix())


def _safe(name: str) -> str:
    return "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in name) or "agent"


def write_reports(run: RunResult, out: Path, formats: Iterable[str] = FORMATS, argv: Sequence[str] = ()) -> list[Path]:
    """Write the reports of ``run`` under ``out``; returns the files written."""
    out.mkdir(parents=True, exist_ok=True)
    agent_dir = out / _safe(run.config.agent)
    agent_dir.mkdir(exist_ok=True)
    fmts = set(formats)
    written: list[Path] = []
    index = to_index(run, argv)
    for case_id, entry in index["agents"][run.config.agent].items():
        entry["reportfile"] = f"{agent_dir.name}/{case_id}.json"
    results = sort_results(run.results)
    if "json" in fmts or "html" in fmts:
        for r in results:
            p = agent_dir / f"{r.case.id}.json"
            _write(p, json.dumps(r.to_json(), indent=1, default=str))
            written.append(p)
        p = out / "index.json"
        _write(p, json.dumps(index, indent=1, default=str))
        written.append(p)
    if "html" in fmts:
        written.extend(write_html(out, [index], {run.config.agent: results}))
    if "junit" in fmts:
        written.append(write_junit(out / "junit.xml", run))
    return written


def _write(path: Path, text: str) -> None:
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


def merge_indexes(indexes: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Several runs' ``index.json`` documents as one (agents side by side; a
    later run's result for the same agent and case wins)."""
    agents: dict[str, dict[str, Any]] = {}
    runs = []
    #: case-id prefix ("pv") -> protocol, from each run's own cases
    by_prefix: dict[str, str] = {}
    for idx in indexes:
        run = idx.get("run", {})
        nested = run.get("merged_runs")
        if nested:  # an index merged before: its runs, not the merge
            runs.extend(nested)
        else:
            runs.append({**run, "agents": sorted(idx.get("agents", {}))})
        by_prefix.update(run.get("protocols_by_prefix", {}))
        for agent, cases in idx.get("agents", {}).items():
            agents.setdefault(agent, {}).update(cases)
            for cid in cases:
                by_prefix.setdefault(cid.split(".", 1)[0], str(run.get("protocol", "?")))
    agents = {a: dict(sorted(cases.items(), key=lambda kv: natural_key(kv[0]))) for a, cases in agents.items()}
    protocols = sorted({str(r.get("protocol", "?")) for r in runs})
    roles = sorted({str(r.get("role", "?")) for r in runs})
    first = runs[0] if runs else {}
    merged_run = {
        **{k: v for k, v in first.items() if k != "agents"},
        "protocol": "+".join(protocols),
        "role": "+".join(roles),
        "merged_runs": runs,
        "protocols_by_prefix": by_prefix,
    }
    return {"run": merged_run, "agents": agents}


def _role_of(case_id: str) -> str:
    """``pv.S2.1`` -> server, ``pv.C1.3`` -> client (the catalogues' id scheme)."""
    part = case_id.split(".", 2)[1:2]
    return {"S": "server", "C": "client"}.get(part[0][:1] if part else "", "?")


def _summary(index: Mapping[str, Any], agents: Sequence[str]) -> list[tuple[str, str, list[str]]]:
    """(protocol, role, one "N PASS, M FAIL" cell per agent) for every protocol and role in ``index``."""
    by_prefix = index["run"].get("protocols_by_prefix", {})
    table: dict[tuple[str, str], dict[str, dict[str, int]]] = {}
    for a in agents:
        for cid, e in index["agents"][a].items():
            key = (str(by_prefix.get(cid.split(".", 1)[0], "?")), _role_of(cid))
            counts = table.setdefault(key, {}).setdefault(a, {})
            counts[e["verdict"]] = counts.get(e["verdict"], 0) + 1
    order = [v.value for v in Verdict]
    rows = []
    for (protocol, role), per_agent in sorted(table.items()):
        cells = [", ".join(f"{per_agent[a][k]} {k}" for k in order if k in per_agent.get(a, {})) for a in agents]
        rows.append((protocol, role, cells))
    return rows


def _run_line(run: Mapping[str, Any]) -> dict[str, Any]:
    """What the matrix shows of one run (``run_id`` only when the run recorded one)."""
    return {
        "protocol": run.get("protocol"),
        "role": run.get("role"),
        "agents": [str(a) for a in run.get("agents") or []],
        "seed": run.get("seed"),
        "run_id": str(run.get("run_id") or ""),
        "profile": run.get("profile"),
        "time_scale": run.get("time_scale"),
        "interrupted": run.get("interrupted"),
    }


def write_html(
    out: Path, indexes: Sequence[Mapping[str, Any]], results: Mapping[str, Sequence[CaseResult]] | None = None
) -> list[Path]:
    """``index.html`` (the matrix) and, for the results given, one page per case."""
    written: list[Path] = []
    index = merge_indexes(indexes)
    agents = sorted(index["agents"])
    titles: dict[str, str] = {}
    for cases in index["agents"].values():
        for cid, e in cases.items():
            titles.setdefault(cid, str(e.get("title", "")))
    ids = sorted(titles, key=natural_key)
    cats: dict[str, list[Any]] = {}
    for cid in ids:
        cells: list[dict[str, Any] | None] = []
        for a in agents:
            e = index["agents"][a].get(cid)
            if e is None:
                cells.append(None)
                continue
            close = e.get("close") or {}
            close_text = f"{close.get('by', '')} {close.get('how', '')}".strip()
            href = _href(str(e.get("reportfile", "")), out)
            cells.append(
                {
                    "verdict": e["verdict"],
                    "href": href,
                    "close": close_text,
                    "profiles": ", ".join(e.get("matched_profiles") or []),
                }
            )
        cat = cid.rsplit(".", 1)[0]
        protocol = index["run"].get("protocols_by_prefix", {}).get(cid.split(".", 1)[0])
        label = f"{cat} ({protocol}, {_role_of(cid)})" if protocol else cat
        cats.setdefault(label, []).append((cid, titles[cid], cells))
    run = index["run"]
    counts: dict[str, int] = {}
    for cases in index["agents"].values():
        for e in cases.values():
            counts[e["verdict"]] = counts.get(e["verdict"], 0) + 1
    order = [v.value for v in Verdict]
    summary = _summary(index, agents)
    index_page, case_page = _templates()
    html = index_page.render(
        run=_run_line(run),
        runs=[_run_line(r) for r in run.get("merged_runs") or [run]],
        counts=[(k, counts[k]) for k in order if k in counts],
        summary=summary if len(summary) > 1 else [],
        agents=agents,
        categories=list(cats.items()),
        colours=_COLOURS,
        css=_CSS,
    )
    p = out / "index.html"
    _write(p, html)
    written.append(p)
    for agent, rs in (results or {}).items():
        d = out / _safe(agent)
        d.mkdir(parents=True, exist_ok=True)
        for r in rs:
            rec = r.to_json()
            page = case_page.render(
                c=rec["case"],
                r=rec,
                colour=_COLOURS[rec["verdict"]],
                log=_log_lines(r.wire_log),
                proc=_process(r),
                legend=LEGEND,
                css=_CSS,
            )
            p = d / f"{r.case.id}.html"
            _write(p, page)
            written.append(p)
    return written


def write_junit(path: Path, run: RunResult) -> Path:
    """JUnit XML: one ``testsuite`` per category, ``name`` and ``classname`` on
    every ``testcase``; FAIL is a ``failure`` (Expected/Observed, spec section,
    replay), ERROR an ``error``, UNSUPPORTED/SKIPPED a ``skipped``; PASS,
    NON-STRICT and INFO pass (their verdict is in ``system-out``)."""
    cfg = run.config
    root = ET.Element("testsuites", name=f"refwire conform {run.protocol}")
    by_cat: dict[str, list[CaseResult]] = {}
    for r in sort_results(run.results):
        by_cat.setdefault(r.case.category, []).append(r)
    total: dict[str, int] = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0}
    for cat, rs in by_cat.items():
        suite = ET.SubElement(root, "testsuite", name=cat)
        props = ET.SubElement(suite, "properties")
        for key, value in (("agent", cfg.agent), ("seed", str(cfg.seed)), ("profile", cfg.profile), ("role", cfg.role)):
            ET.SubElement(props, "property", name=key, value=value)
        run_id = getattr(cfg, "the_run_id", None) or getattr(cfg, "run_id", None)  # runs that have one
        if run_id:
            ET.SubElement(props, "property", name="run_id", value=str(run_id))
        counts: dict[str, int] = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0}
        t_sum = 0.0
        for r in rs:
            counts["tests"] += 1
            t_sum += r.duration
            tc = ET.SubElement(
                suite,
                "testcase",
                name=f"{r.case.id} {r.case.slug}",
                classname=f"refwire.conform.{run.protocol}.{cat}",
                time=f"{r.duration:.3f}",
            )
            detail = f"Requirement: {r.case.requirement}\nExpected: {r.expected}\nObserved: {r.observed_text()}\n{r.reason}\nReplay: {r.replay}"
            if r.verdict is Verdict.FAIL:
                counts["failures"] += 1
                el = ET.SubElement(tc, "failure", message=f"{r.case.id}: {r.reason or 'FAIL'}", type="FAIL")
                el.text = detail
            elif r.verdict is Verdict.ERROR:
                counts["errors"] += 1
                el = ET.SubElement(tc, "error", message=r.reason or "ERROR", type="ERROR")
                el.text = detail
            elif r.verdict in (Verdict.UNSUPPORTED, Verdict.SKIPPED):
                counts["skipped"] += 1
                ET.SubElement(tc, "skipped", message=f"{r.verdict.value}: {r.reason}")
            out = ET.SubElement(tc, "system-out")
            out.text = f"verdict: {r.verdict.value}\n{detail}"
            proc = _process(r)
            if proc is not None:
                err = ET.SubElement(tc, "system-err")
                shown = f"last {len(proc['stderr'])} of {proc['total']} lines" if proc["total"] > len(proc["stderr"]) else "all"
                err.text = f"testee: {proc['argv']}\nexit status: {proc['exit']}\nstderr ({shown}):\n" + "\n".join(proc["stderr"])
        for k, v in counts.items():
            suite.set(k, str(v))
            total[k] += v
        suite.set("time", f"{t_sum:.3f}")
    for k, v in total.items():
        root.set(k, str(v))
    tree = ET.ElementTree(root)
    ET.indent(tree)
    tmp = path.with_suffix(".xml.tmp")
    tree.write(tmp, encoding="utf-8", xml_declaration=True)
    os.replace(tmp, path)
    return path

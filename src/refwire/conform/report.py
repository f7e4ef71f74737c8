"""Reports of a conformance run: ``index.json``, one JSON record per case, a
static HTML matrix with a page per case, and JUnit XML.

Layout of ``--out DIR``::

    DIR/index.json              agent -> case -> verdict, close, matched profiles, seed, replay
    DIR/<agent>/<case>.json     the whole record: expected, observed, frames, keepalives, wire log
    DIR/index.html              agent x case matrix, grouped by category, coloured by verdict
    DIR/<agent>/<case>.html     description, procedure, requirement, expected vs observed, keepalives, wire log
    DIR/junit.xml               one testsuite per category, one testcase per case

The HTML needs no server and no network: plain files with inline CSS.
"""

from __future__ import annotations

import functools
import json
import os
import xml.etree.ElementTree as ET
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from .model import CaseResult, Verdict, id_key
from .runner import RunResult, sort_results, to_index

__all__ = ["FORMATS", "merge_indexes", "write_html", "write_junit", "write_reports"]

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
"""

_INDEX_SOURCE = """<!doctype html><html><head><meta charset="utf-8"><title>refwire conform: {{ run.protocol }}</title><style>{{ css }}</style></head><body>
<h1>refwire conform {{ run.protocol }} ({{ run.role }} under test)</h1>
<p class="small">seed {{ run.seed }} · profile {{ run.profile }} · time scale {{ run.time_scale }}{% if run.interrupted %} · <b>interrupted</b>{% endif %}</p>
<p>{% for k, n in counts %}<span class="v" style="background:{{ colours[k] }};padding:0 .4em">{{ k }} {{ n }}</span> {% endfor %}</p>
{% if summary %}<table><tr><th>protocol</th><th>role</th>{% for a in agents %}<th>{{ a }}</th>{% endfor %}</tr>
{% for protocol, role, cells in summary %}<tr><td>{{ protocol }}</td><td>{{ role }}</td>{% for c in cells %}<td class="small">{{ c }}</td>{% endfor %}</tr>
{% endfor %}</table><p></p>{% endif %}
<table><tr><th>case</th><th>title</th>{% for a in agents %}<th>{{ a }}</th><th class="small">close</th>{% endfor %}</tr>
{% for cat, rows in categories %}<tr><th class="cat" colspan="{{ 2 + 2 * agents|length }}">{{ cat }}</th></tr>
{% for cid, title, cells in rows %}<tr><td>{{ cid }}</td><td>{{ title }}</td>
{% for cell in cells %}{% if cell %}<td class="v" style="background:{{ colours[cell.verdict] }}"><a href="{{ cell.href }}">{{ cell.verdict }}</a>{% if cell.profiles %}<div class="small" style="color:#fff">like {{ cell.profiles }}</div>{% endif %}</td><td class="small">{{ cell.close }}</td>{% else %}<td></td><td></td>{% endif %}{% endfor %}</tr>
{% endfor %}{% endfor %}</table></body></html>
"""

_CASE_SOURCE = """<!doctype html><html><head><meta charset="utf-8"><title>{{ c.id }} {{ c.slug }} - {{ r.agent }}</title><style>{{ css }}</style></head><body>
<p><a href="../index.html">&larr; matrix</a></p>
<h1>{{ c.id }} {{ c.slug }}</h1><h2>{{ c.title }}</h2>
<p><span class="v" style="background:{{ colour }};padding:.1em .5em">{{ r.verdict }}</span> agent <b>{{ r.agent }}</b> · profile {{ r.profile }}{% if r.matched_profiles %} · consistent with {{ r.matched_profiles|join(", ") }}{% endif %} · {{ "%.3f"|format(r.duration_s) }} s · case seed {{ r.case_seed }}</p>
{% if r.reason %}<p>{{ r.reason }}</p>{% endif %}
<table>
<tr><th>Requirement</th><td>{{ c.requirement }}</td></tr>
<tr><th>Procedure</th><td>{{ c.procedure }}</td></tr>
<tr><th>Vectors</th><td>{{ c.vectors|join(", ") }}</td></tr>
<tr><th>Tags</th><td>{{ c.tags|join(", ") }}</td></tr>
<tr><th>Expected</th><td>{% for e in c.expects %}<div>{{ e.verdict }} for {{ e.profiles|join(", ") }}: {{ e.outcome }}{% if e.note %} <span class="small">({{ e.note }})</span>{% endif %}</div>{% endfor %}</td></tr>
<tr><th>Observed</th><td>{{ r.observed }}</td></tr>
<tr><th>Close</th><td>{% for k, v in r.close.items() %}{{ k }}={{ v }} {% endfor %}</td></tr>
{% if c.role == "server" %}<tr><th>Keepalives</th><td>{% for k in r.keepalives %}<div>{{ "%.3f"|format(k.t) }} s: {{ k.token }} (version byte '{{ k.version }}'), {{ "%.3f"|format(k.since_batch_s) }} s after {{ k.covers }}</div>{% else %}none{% endfor %}</td></tr>{% endif %}
<tr><th>Replay</th><td><code>{{ r.replay }}</code></td></tr>
</table>
<h3>Wire log</h3><pre>{% for e in log %}<span class="{{ e.cls }}">{{ e.text }}</span>
{% endfor %}</pre></body></html>
"""


@functools.cache
def _templates() -> tuple[Any, Any]:
    """The two page templates, compiled on first use (jinja2 is imported only
    when a report is written, not whenever the command line starts)."""
    import jinja2

    env = jinja2.Environment(autoescape=True, undefined=jinja2.StrictUndefined, trim_blocks=True, lstrip_blocks=True)
    return env.from_string(_INDEX_SOURCE), env.from_string(_CASE_SOURCE)


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
        else:
            text = str(e.get("text", ""))
            if e.get("traceback"):
                text += "\n" + str(e["traceback"])
            out.append({"cls": "action", "text": f"{t} ACTION {text}"})
    return out


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
        runs.append(run)
        by_prefix.update(run.get("protocols_by_prefix", {}))
        for agent, cases in idx.get("agents", {}).items():
            agents.setdefault(agent, {}).update(cases)
            for cid in cases:
                by_prefix.setdefault(cid.split(".", 1)[0], str(run.get("protocol", "?")))
    protocols = sorted({str(r.get("protocol", "?")) for r in runs})
    roles = sorted({str(r.get("role", "?")) for r in runs})
    first = runs[0] if runs else {}
    merged_run = {
        **first,
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
    ids = sorted(titles, key=id_key)
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
            href = str(e.get("reportfile", "")).replace(".json", ".html")
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
        run={
            "protocol": run.get("protocol"),
            "role": run.get("role"),
            "seed": run.get("seed"),
            "profile": run.get("profile"),
            "time_scale": run.get("time_scale"),
            "interrupted": run.get("interrupted"),
        },
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
            page = case_page.render(c=rec["case"], r=rec, colour=_COLOURS[rec["verdict"]], log=_log_lines(r.wire_log), css=_CSS)
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
            detail = f"Requirement: {r.case.requirement}\nExpected: {r.expected}\nObserved: {r.observed}\n{r.reason}\nReplay: {r.replay}"
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

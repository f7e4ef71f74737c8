"""Running the Lumberjack client catalogue against refwire's own client (tests/conform/peers/refwire_client.py)."""

from __future__ import annotations

import shlex
import sys
from pathlib import Path

from refwire.conform.cases.lumberjack import CATALOGUE
from refwire.conform.clients import ClientSetup, run_client_case
from refwire.conform.runner import RunConfig, RunResult, run_cases

#: The peer the client cases drive: refwire's Lumberjack client as a command.
PEER = Path(__file__).resolve().parent.parent / "conform" / "peers" / "refwire_client.py"


def command(*extra: str) -> str:
    """The ``--exec`` template that runs :data:`PEER` with the case's placeholders."""
    return shlex.join([sys.executable, str(PEER)]) + " {host} {port} {events} --tls-ca {tls_ca} " + " ".join(extra)


async def run_lumberjack_client_cases(
    template: str | None, *, include: str | None = None, profile: str = "strict", tags: str | None = None
) -> RunResult:
    """Run the Lumberjack client cases (those ``include``/``tags`` select) against ``template``."""
    cfg = RunConfig(role="client", agent="refwire-client", profile=profile, seed=5, jobs=4)
    setup = ClientSetup(exec_template=template)

    async def one(case, first):  # type: ignore[no-untyped-def]
        return await run_client_case(case, CATALOGUE, cfg, setup, 0)

    return await run_cases(CATALOGUE, cfg, include=include, tags=tags, run_one=one)

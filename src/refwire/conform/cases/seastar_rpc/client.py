"""Seastar RPC client cases (``ss.C…``): refwire plays a server -- delaying,
reordering, failing and closing on purpose -- and the testee client follows
the contract of ``specs/seastar-rpc/README.md §12``.
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable

import attrs

from ....seastar_rpc.frames import Features, Request, Response, UserError
from ...clients import ClientSession
from ...conversation import Conversation
from ...model import CaseBook, Expect, expect
from ._common import ECHO, PASS, SPEC, ClientObserver

#: Each case's function answers the client's calls inside :func:`serve`, the serving loop.
BOOK = CaseBook(SPEC, client_wrap=lambda fn: functools.partial(serve, answer=fn))
client_case = BOOK.client
EXIT_OK = "exit 0"
#: The client reported a failure itself (not killed at the budget end).
EXIT_FAILED = "exit [1-9]*"


class SsState:
    """What refwire (as the server) answered across a client case."""

    def __init__(self, s: ClientSession) -> None:
        self.s = s
        self.echoed = 0

    def finish(self, s: ClientSession) -> None:
        s.note(f"all {s.events} calls echoed" if self.echoed >= s.events else f"{self.echoed} of {s.events} calls echoed")


Answer = Callable[[SsState, Conversation, ClientObserver], Awaitable[None]]


def _cobs(c: Conversation) -> ClientObserver:
    assert isinstance(c.observer, ClientObserver)
    return c.observer


def response(c: Conversation, msg_id: int, payload: bytes) -> bytes:
    offer = _cobs(c).offer
    return Response(msg_id, payload, 0).encode(with_duration=offer is not None and offer.handler_duration)


async def reply_echo(st: SsState, c: Conversation, req: Request, *, label: str = "") -> bool:
    ok = await c.send(response(c, req.msg_id, req.payload), split="whole", label=label or f"echo reply {req.msg_id}")
    if ok and req.verb == ECHO:
        st.echoed += 1
    return ok


async def wait_requests(c: Conversation, n: int, timeout: float) -> list[Request]:
    await c.wait_for(lambda cv: len(_cobs(cv).requests) >= n, timeout, label=f"{n} request(s)")
    return _cobs(c).requests[:n]


async def serve(s: ClientSession, answer: Answer) -> None:
    """Accept the client's connection, answer its negotiation (echo TIMEOUT,
    HANDLER_DURATION and ISOLATION, no compressor), run ``answer``, then wait
    for the testee to exit."""
    st = SsState(s)
    s.after_exit.append(st.finish)
    c = await s.accept(10.0)
    if c is None:
        return
    obs = _cobs(c)
    await c.wait_for(lambda cv: obs.offer is not None, 10.0, label="the negotiation offer")
    if obs.offer is None:
        return
    reply = Features(timeout=obs.offer.timeout, handler_duration=obs.offer.handler_duration, isolation=obs.offer.isolation)
    if not await c.send(reply.encode(), split="whole", label="negotiation reply"):
        return
    await answer(st, c, obs)
    await s.wait_exit(10.0)


def _ok(n: int) -> list[Expect]:
    return [expect(PASS, "*", ["..."], facts=[f"all {n} calls echoed", EXIT_OK])]


_FAILED = [expect(PASS, "*", ["..."], facts=[EXIT_FAILED], note="reported the failure")]


@client_case(
    "ss.C1.1",
    "delayed-replies",
    "Replies delayed 0.3 s each are waited for",
    "§3, §12",
    "Answer each echo call 0.3 s after it arrives; expect every call echoed and exit 0.",
    _ok(4),
    events=4,
)
async def c1_1(st: SsState, c: Conversation, obs: ClientObserver) -> None:
    for k in range(st.s.events):
        reqs = await wait_requests(c, k + 1, 10.0)
        if len(reqs) <= k:
            return
        await c.sleep(0.3)
        if not await reply_echo(st, c, reqs[k]):
            return


@client_case(
    "ss.C1.2",
    "reordered-replies",
    "Replies in reverse order are matched by msg_id",
    "§1.3, §3, §12",
    "Wait for all the client's calls (up to 3 s), answer them last first; expect every call echoed and exit 0.",
    _ok(5),
    events=5,
)
async def c1_2(st: SsState, c: Conversation, obs: ClientObserver) -> None:
    done = 0
    while done < st.s.events:
        await wait_requests(c, st.s.events, 3.0)
        batch = obs.requests[done:]
        if not batch:
            return
        for req in reversed(batch):
            if not await reply_echo(st, c, req, label=f"reply {req.msg_id} (reordered)"):
                return
        done += len(batch)


@client_case(
    "ss.C1.3",
    "exception-reply",
    "A USER exception reply is a failure, not a matched echo",
    "§3, §12",
    "Answer the first call with a USER exception `conform: refused`, echo the others; expect a non-zero exit.",
    _FAILED,
    events=3,
)
async def c1_3(st: SsState, c: Conversation, obs: ClientObserver) -> None:
    for k in range(st.s.events):
        reqs = await wait_requests(c, k + 1, 10.0)
        if len(reqs) <= k:
            return
        req = reqs[k]
        if k == 0:
            data = Response(-req.msg_id, UserError(b"conform: refused").encode(), 0)
            offer = obs.offer
            if not await c.send(
                data.encode(with_duration=offer is not None and offer.handler_duration), split="whole", label="USER exception"
            ):
                return
        elif not await reply_echo(st, c, req):
            return


@client_case(
    "ss.C1.4",
    "close-mid-reply",
    "The server closes in the middle of a reply: the client fails, never hangs",
    "§1.4, §12",
    "Send the first half of the first call's reply, then FIN; expect a non-zero exit within the budget.",
    _FAILED,
    events=3,
)
async def c1_4(st: SsState, c: Conversation, obs: ClientObserver) -> None:
    reqs = await wait_requests(c, 1, 10.0)
    if not reqs:
        return
    data = response(c, reqs[0].msg_id, reqs[0].payload)
    if await c.send(data[: max(1, len(data) // 2)], split="whole", label="half a reply"):
        await c.close("FIN")


@client_case(
    "ss.C1.5",
    "corrupted-payload",
    "A reply whose payload differs from the request's is a failure",
    "§12",
    "Echo every call, flipping the first byte of the second reply's payload; expect a non-zero exit.",
    _FAILED,
    events=3,
)
async def c1_5(st: SsState, c: Conversation, obs: ClientObserver) -> None:
    for k in range(st.s.events):
        reqs = await wait_requests(c, k + 1, 10.0)
        if len(reqs) <= k:
            return
        req = reqs[k]
        if k == 1:
            bad = bytes([req.payload[0] ^ 0xFF]) + req.payload[1:] if req.payload else b"x"
            req = attrs.evolve(req, payload=bad, verb=0)
        if not await reply_echo(st, c, req):
            return

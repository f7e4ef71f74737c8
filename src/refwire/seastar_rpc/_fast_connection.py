"""The speed path of Seastar RPC's client machine (specs/seastar-rpc/README.md §3, §7).

The plain path, :class:`refwire.seastar_rpc.connection.ClientConnection`, turns
its input into events frame by frame: each :meth:`FrameDecoder.next_frame
<refwire.seastar_rpc.frames.FrameDecoder.next_frame>` becomes its event
(``_on_frame``).  Here, once negotiated, regular responses are decoded a run at
a time in columns (:meth:`FrameDecoder.next_responses
<refwire.seastar_rpc.frames.FrameDecoder.next_responses>`) and each becomes its
:class:`~refwire.seastar_rpc.events.Reply` only when the application asks for the
next event -- as a frame decoded from the buffer would -- so a cancel or a timer
between two events makes a later reply stray exactly as on the plain path.  The
replies are built through their slots (no validators to skip).  Anything else,
and the responses a run stopped before, go frame by frame through the plain
path's handlers (``tests/test_seastar_differential.py``).

It registers itself in :data:`refwire.seastar_rpc.connection._SPEED` when
imported (the package's ``__init__`` imports it, so before any use).
"""

from __future__ import annotations

from itertools import repeat
from typing import Final

import attrs

from .connection import _SPEED, ClientConnection, State
from .events import Reply, StrayReply
from .frames import Response

__all__ = ["client_pump"]

# Trusted construction of the client's Reply events (fields from the decoder's
# checked columns): through the slots, skipping the frozen __init__.
_new = object.__new__
_SET_REPLY_ID, _SET_REPLY_PAYLOAD, _SET_REPLY_DURATION = (Reply.__dict__[a.name].__set__ for a in attrs.fields(Reply))
assert [a.name for a in attrs.fields(Reply)] == ["msg_id", "payload", "handler_duration"]

_READY: Final = State.READY  # a module global: State.READY is a lookup through the Enum metaclass


def client_pump(conn: ClientConnection) -> None:
    """``ClientConnection._pump`` on the speed path: decode buffered input into events."""
    # The hot path: once negotiated, regular responses are decoded a run at a
    # time in columns (FrameDecoder.next_responses) and each becomes its event
    # only when the application asks for the next one -- as a frame decoded
    # from the buffer would -- so a cancel or a timer between two events
    # makes a later reply stray exactly as before.  Anything else, and the
    # responses the run stopped before, go frame by frame (_on_frame).
    events = conn._events
    decoder = conn._decoder
    while not events:
        replies = conn._replies
        if replies is not None:
            item = next(replies, None)
            if item is not None:
                msg_id, payload, duration = item
                conn._transition("response")
                pending = conn._pending
                if msg_id in pending:
                    del pending[msg_id]
                    reply = _new(Reply)
                    _SET_REPLY_ID(reply, msg_id)
                    _SET_REPLY_PAYLOAD(reply, payload)
                    _SET_REPLY_DURATION(reply, duration)
                    events.append(reply)
                else:
                    events.append(StrayReply(msg_id, 1 <= msg_id < conn._next_id, None))
                continue
            conn._replies = None
        if conn.state is _READY:
            run = decoder.next_responses()
            if run is not None:
                durations = run.durations
                # (not strict: repeat() is endless; a run's columns have one length)
                conn._replies = zip(run.msg_ids, run.payloads, repeat(None) if durations is None else durations, strict=False)
                continue
        frame = decoder.next_frame()
        if frame is None:
            return
        if type(frame) is Response:
            _on_response(conn, frame)
        else:
            conn._on_frame(frame)


def _on_response(conn: ClientConnection, frame: Response) -> None:
    """``ClientConnection._on_response`` for a reply to a pending call, its
    :class:`Reply` built through the slots; anything else is the plain path's."""
    msg_id = frame.msg_id
    pending = conn._pending
    if msg_id < 0 or msg_id not in pending:
        conn._on_response(frame)
        return
    conn._transition("response")
    del pending[msg_id]
    reply = _new(Reply)
    _SET_REPLY_ID(reply, msg_id)
    _SET_REPLY_PAYLOAD(reply, frame.payload)
    _SET_REPLY_DURATION(reply, frame.handler_duration)
    conn._events.append(reply)


_SPEED["client_pump"] = client_pump

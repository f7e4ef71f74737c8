"""The one machine contract (refwire.sansio), checked the same way on every
connection machine of every dialect: the signature set, ``now`` required,
``handle_timer`` returning nothing, the shape of an EOF inside a frame, and what
``send_failed`` leaves behind."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

import pytest

from refwire.errors import RemoteProtocolError
from refwire.sansio import NEED_DATA, Machine

#: name -> (factory, a proper prefix of the first frame its peer sends)
MACHINES: dict[str, tuple[Callable[[], Any], bytes]] = {}


def machine(name: str, prefix: bytes) -> Callable[[Callable[[], Any]], Callable[[], Any]]:
    def register(factory: Callable[[], Any]) -> Callable[[], Any]:
        MACHINES[name] = (factory, prefix)
        return factory

    return register


@machine("lumberjack-server", b"2W\x00")
def _lumberjack_server() -> Any:
    from refwire.lumberjack import ServerConnection

    return ServerConnection()


@machine("lumberjack-client", b"2A\x00")
def _lumberjack_client() -> Any:
    from refwire.lumberjack import ClientConnection

    client = ClientConnection()
    client.send_window([{"a": 1}], now=0.0)
    client.data_to_send()
    return client


@machine("pravega-server", b"\xff\xff\xff")  # a Hello's type code, -127, cut short
def _pravega_server() -> Any:
    from refwire.pravega import ServerConnection

    return ServerConnection()


@machine("pravega-client", b"\xff\xff\xff")
def _pravega_client() -> Any:
    from refwire.pravega import ClientConnection

    client = ClientConnection()
    client.initiate(now=0.0)
    client.data_to_send()
    return client


@machine("pravega-draft-2017-server", b"\x00\x00\x00")  # a command header cut short
def _draft_server() -> Any:
    from refwire.pravega.draft2017.connection import ServerConnection

    return ServerConnection()


@machine("pravega-draft-2017-client", b"\x00\x00\x00")
def _draft_client() -> Any:
    from refwire.pravega.draft2017.connection import ClientConnection

    return ClientConnection(keepalive_interval=10.0, silence_timeout=180.0, now=0.0)


@machine("tank-client", b"\x04")  # the broker's greeting Ping: msg 4, then a u32 length
def _tank_client() -> Any:
    from refwire.tank import ClientConnection

    return ClientConnection(now=0.0)


@machine("tank-broker", b"\x04\x00")
def _tank_broker() -> Any:
    from refwire.tank import BrokerConnection

    return BrokerConnection(now=0.0)


def _seastar_pair() -> tuple[Any, Any]:
    from refwire.seastar_rpc import ClientConnection, ServerConnection

    client, server = ClientConnection(), ServerConnection()
    client.initiate(now=0.0)
    server.receive_data(client.data_to_send(), now=0.0)
    _drain(server)
    server.accept(connection_id=1, now=0.0)
    client.receive_data(server.data_to_send(), now=0.0)
    _drain(client)
    return client, server


# after negotiation: the first bytes of a frame header (negotiation's own EOF text is Seastar's)
@machine("seastar-client", b"\x01\x00\x00")
def _seastar_client() -> Any:
    return _seastar_pair()[0]


@machine("seastar-server", b"\x01\x00\x00")
def _seastar_server() -> Any:
    return _seastar_pair()[1]


NOW_METHODS = ("receive_data", "connection_lost", "send", "handle_timer", "send_failed")
ALL = sorted(MACHINES)


@pytest.mark.parametrize("name", ALL)
def test_signature_set(name: str) -> None:
    m = MACHINES[name][0]()
    assert isinstance(m, Machine)
    for method in NOW_METHODS:
        params = inspect.signature(getattr(m, method)).parameters
        assert "now" in params, f"{name}.{method} takes no now"
        now = params["now"]
        assert now.kind is inspect.Parameter.KEYWORD_ONLY, f"{name}.{method}: now must be keyword-only"
        assert now.default is inspect.Parameter.empty, f"{name}.{method}: now must be required (no default)"
    assert isinstance(m.transitions_seen, set)
    assert m.state is not None


@pytest.mark.parametrize("name", ALL)
def test_now_is_required(name: str) -> None:
    m = MACHINES[name][0]()
    with pytest.raises(TypeError):
        m.receive_data(b"")
    with pytest.raises(TypeError):
        m.handle_timer()
    with pytest.raises(TypeError):
        m.send_failed()
    with pytest.raises(TypeError):
        m.connection_lost()


@pytest.mark.parametrize("name", ALL)
def test_handle_timer_only_queues(name: str) -> None:
    m = MACHINES[name][0]()
    deadline = m.next_deadline()
    assert deadline is None or isinstance(deadline, float | int)
    assert m.handle_timer(now=0.0) is None
    assert m.handle_timer(now=1e9) is None  # whatever is due: events and bytes are queued, nothing returned
    assert isinstance(m.data_to_send(), bytes)


def _drain(m: Any) -> list[Any]:
    events = []
    for _ in range(1000):
        ev = m.next_event()
        if ev is NEED_DATA:
            return events
        events.append(ev)
    raise AssertionError("next_event never returned NEED_DATA")


@pytest.mark.parametrize("name", ALL)
def test_eof_inside_a_frame(name: str) -> None:
    """EOF in the middle of a frame raises the shared ``closed_inside`` error
    (field ``(eof)``) once the events before it are out; TANK, whose peers treat it
    as a dropped connection, queues its closing event with ``clean=False``."""
    factory, prefix = MACHINES[name]
    m = factory()
    m.receive_data(prefix, now=1.0)
    _drain(m)
    m.receive_data(b"", now=2.0)
    try:
        events = _drain(m)
    except RemoteProtocolError as exc:
        assert exc.field == "(eof)", exc
        assert exc.reason.startswith("connection closed inside"), exc
        with pytest.raises(RemoteProtocolError):
            m.next_event()  # the error stays
        return
    assert name.startswith("tank"), f"{name}: EOF inside a frame gave {events} and no error"
    assert [type(e).__name__ for e in events] == ["ConnectionClosed"]
    assert events[0].clean is False


@pytest.mark.parametrize("name", ALL)
def test_send_failed_closes_once(name: str) -> None:
    m = MACHINES[name][0]()
    _drain(m)
    m.send_failed(now=3.0)
    assert m.data_to_send() == b""
    events = _drain(m)
    assert [type(e).__name__ for e in events][-1:] == ["ConnectionClosed"], events
    assert events[-1].clean is False
    m.send_failed(now=4.0)  # a second report changes nothing
    m.connection_lost(now=4.0)
    assert _drain(m) == []
    assert m.data_to_send() == b""


@pytest.mark.parametrize("name", ALL)
def test_no_frame_timeout_once_input_ended(name: str) -> None:
    """A frame cut short by EOF can never complete: a later ``handle_timer``
    must not turn the ended connection into a ``(timeout)`` error (the EOF's
    own outcome stays)."""
    factory, prefix = MACHINES[name]
    m = factory()
    m.frame_timeout = 1.0
    m.receive_data(prefix, now=1.0)
    _drain(m)
    m.receive_data(b"", now=1.5)
    fields = []
    for _ in range(2):  # the EOF's outcome, then again after every timer is due
        try:
            _drain(m)
        except RemoteProtocolError as exc:
            fields.append(exc.field)
        m.handle_timer(now=1e9)
    assert set(fields) <= {"(eof)"}, fields

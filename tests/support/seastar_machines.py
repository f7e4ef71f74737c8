"""Driving Seastar RPC Sans-IO machines (specs/seastar-rpc/README.md §2): draining
their events, and a client and server past the negotiation."""

from __future__ import annotations

from typing import Any

from refwire.seastar_rpc import NEED_DATA, ClientConnection, ConnectionClosed, Negotiated, NegotiationRequested, ServerConnection


def events(m: Any) -> list[Any]:
    """``m``'s events until NEED_DATA (or up to and including ConnectionClosed)."""
    out = []
    while (ev := m.next_event()) is not NEED_DATA:
        out.append(ev)
        if isinstance(ev, ConnectionClosed):
            break
    return out


def pair(**client_kw: Any) -> tuple[ClientConnection, ServerConnection]:
    """A client (built with ``client_kw``) and a server, negotiated with each other."""
    client = ClientConnection(**client_kw)
    server = ServerConnection()
    client.initiate(now=0.0)
    server.receive_data(client.data_to_send(), now=0.0)
    (req,) = events(server)
    assert isinstance(req, NegotiationRequested)
    server.accept(connection_id=0x10000, now=0.0)
    client.receive_data(server.data_to_send(), now=0.0)
    (neg,) = events(client)
    assert isinstance(neg, Negotiated)
    return client, server

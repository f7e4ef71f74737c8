"""The control API of ``refwire chaos``: HTTP/JSON in toxiproxy's shape.

Existing toxiproxy client libraries drive it unchanged: the same paths, JSON
field names, status codes and error bodies (``{"error": ..., "status": N}``)::

    GET    /version                          {"version": "..."}
    GET    /proxies                          {name: proxy, ...}
    POST   /proxies                          create {name, listen, upstream, enabled, protocol?, seed?} -> 201
    POST   /populate                         [proxy, ...] -> 201 {"proxies": [...]}
    GET    /proxies/{name}                   the proxy with its toxics
    POST   /proxies/{name}                   update (PATCH too): enabled false stops listening, drops its connections
    DELETE /proxies/{name}                   -> 204
    GET    /proxies/{name}/toxics            [toxic, ...]
    POST   /proxies/{name}/toxics            create {name, type, stream, toxicity, attributes} -> 200 (as toxiproxy)
    GET    /proxies/{name}/toxics/{toxic}
    POST   /proxies/{name}/toxics/{toxic}    update (PATCH too) {attributes, toxicity}
    DELETE /proxies/{name}/toxics/{toxic}    -> 204
    POST   /reset                            enable every proxy, remove every toxic -> 204

refwire's own: the optional ``protocol`` of a proxy (default: the server's,
``tcp`` for a plain byte relay), toxic type ``frame`` (a schedule rule in
``attributes``, :mod:`refwire.chaos.toxics`), ``GET /connections`` (per live
connection and direction: its frames and the rules and toxics armed on it) and
``GET /log?since=N`` (the record's entries from index ``N`` on, each with its
proxy: actions, toxic arm draws, connections opened and closed).

HTTP is h11's (Sans-IO); request heads are limited to 16 KiB and bodies to
``max_body`` bytes (413 past it), connections are kept alive, a request from a
browser (``User-Agent: Mozilla/...``) is refused with 403 as toxiproxy does, so
a web page cannot drive a proxy on localhost.
"""

from __future__ import annotations

import collections
import contextlib
import json
import logging
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import asynccontextmanager
from typing import IO, Any
from urllib.parse import parse_qs, unquote, urlsplit

import attrs
import h11
import trio

from .. import __version__
from ..drivers import listener_address, parse_hostport
from ..protocols import names
from .proxy import ChaosProxy
from .rules import Schedule
from .toxics import ToxicError

__all__ = ["ApiError", "ControlServer", "ManagedProxy", "open_control"]

log = logging.getLogger("refwire.chaos.control")

#: The largest request head (request line and headers) read.
MAX_HEAD = 16 * 1024
#: Seconds a kept-alive connection may stay idle, and a request may take to arrive whole.
IDLE_TIMEOUT = 60.0
READ_TIMEOUT = 15.0
#: The protocol name of a plain byte relay.
PLAIN = "tcp"


class ApiError(Exception):
    """An API error: answered as ``{"error": message, "status": status}``."""

    def __init__(self, message: str, status: int) -> None:
        super().__init__(message)
        self.message = message
        self.status = status


def _missing(field: str) -> ApiError:
    return ApiError(f"missing required field: {field}", 400)


def _bad_body(why: str) -> ApiError:
    return ApiError(f"bad request body: {why}", 400)


@attrs.define(eq=False)
class ManagedProxy:
    """A proxy the control server runs: its toxiproxy fields and the running :class:`ChaosProxy`."""

    name: str
    listen: str
    upstream: str
    protocol: str
    proxy: ChaosProxy
    enabled: bool = False
    scope: trio.CancelScope | None = None
    done: trio.Event | None = None

    def to_json(self) -> dict[str, Any]:
        """The proxy as toxiproxy shows it, plus its ``protocol``."""
        return {
            "name": self.name,
            "listen": self.listen,
            "upstream": self.upstream,
            "enabled": self.enabled,
            "protocol": self.protocol,
            "toxics": self.proxy.toxics_json(),
        }


@attrs.frozen
class _Spec:
    name: str
    listen: str
    upstream: str
    protocol: str
    enabled: bool
    seed: int | None


class ControlServer:
    """Runs proxies and answers the control API (see the module docstring).

    ``await nursery.start(server.serve, listeners)``; proxies run inside
    :meth:`serve`, so they stop with it.
    """

    def __init__(
        self,
        *,
        seed: int = 0,
        protocol: str = PLAIN,
        record: IO[str] | None = None,
        max_body: int = 1024 * 1024,
        max_log: int = 100_000,
        max_frame_size: int = 64 * 1024 * 1024,
    ) -> None:
        #: the seed of proxies created without one
        self.seed = seed
        #: the protocol of proxies created without one
        self.protocol = protocol
        self.record = record
        self.max_body = max_body
        self.max_frame_size = max_frame_size
        self.proxies: dict[str, ManagedProxy] = {}
        self.addresses: list[str] = []
        self._log: collections.deque[dict[str, Any]] = collections.deque(maxlen=max_log)
        self._logged = 0  # entries ever logged (the next one's index)
        self._lock = trio.Lock()
        self._nursery: trio.Nursery | None = None

    # ------------------------------------------------------------------ running

    async def serve(
        self, listeners: list[trio.SocketListener], *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
    ) -> None:
        """Answer the API on ``listeners`` and run the proxies, until cancelled."""
        self.addresses = [listener_address(lst) for lst in listeners]
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            for lst in listeners:
                nursery.start_soon(self._accept_loop, lst, nursery)
            task_status.started()

    async def _accept_loop(self, listener: trio.SocketListener, nursery: trio.Nursery) -> None:
        async with listener:
            while True:
                try:
                    stream = await listener.accept()
                except (trio.ClosedResourceError, trio.BrokenResourceError):
                    return
                nursery.start_soon(self._http_connection, stream)

    async def add_proxy(
        self,
        name: str,
        *,
        upstream: str,
        listen: str = "127.0.0.1:0",
        protocol: str | None = None,
        enabled: bool = True,
        seed: int | None = None,
    ) -> ManagedProxy:
        """Create (and, if ``enabled``, start) a proxy, as ``POST /proxies`` does;
        :class:`ApiError` if it cannot be."""
        async with self._lock:
            if name in self.proxies:
                raise ApiError("proxy already exists", 409)
            managed = self._new(_Spec(name, listen, upstream, protocol or self.protocol, enabled, seed))
            if enabled:
                await self._start(managed)
            self.proxies[name] = managed
            return managed

    async def attach(self, name: str, proxy: ChaosProxy, *, listen: str, enabled: bool = True) -> ManagedProxy:
        """Run a proxy built by the caller (a schedule, a record, a replay, ``--check``)
        under the API as ``name``; its record entries go to ``GET /log`` too."""
        async with self._lock:
            if name in self.proxies:
                raise ApiError("proxy already exists", 409)
            upstream = proxy.upstream_name
            managed = ManagedProxy(name, listen, upstream, proxy.protocol, proxy)
            proxy.on_entry = lambda entry: self._append(name, entry)
            if enabled:
                await self._start(managed)
            self.proxies[name] = managed
            return managed

    def _new(self, spec: _Spec) -> ManagedProxy:
        if spec.protocol != PLAIN and spec.protocol not in names():
            raise _bad_body(f"unknown protocol {spec.protocol!r} (known: {PLAIN}, {', '.join(names())})")
        upstream = _address("upstream", spec.upstream)
        _address("listen", spec.listen)
        seed = spec.seed if spec.seed is not None else self.seed
        name = spec.name
        proxy = ChaosProxy(
            spec.protocol,
            upstream,
            Schedule(spec.protocol, (), seed),
            record=self.record,
            max_frame_size=self.max_frame_size,
            on_entry=lambda entry: self._append(name, entry),
        )
        return ManagedProxy(spec.name, spec.listen, spec.upstream, spec.protocol, proxy)

    def _append(self, proxy: str, entry: Mapping[str, Any]) -> None:
        self._log.append({"index": self._logged, "proxy": proxy, **entry})
        self._logged += 1

    async def _start(self, managed: ManagedProxy) -> None:
        if managed.enabled:
            return
        assert self._nursery is not None, "ControlServer.serve is not running"
        host, port = parse_hostport(managed.listen)
        try:
            listeners = await trio.open_tcp_listeners(port, host=host)
        except OSError as exc:
            raise ApiError(f"listen tcp {managed.listen}: {exc.strerror or exc}", 500) from None
        managed.listen = listener_address(listeners[0])
        managed.scope = trio.CancelScope()
        managed.done = trio.Event()
        managed.enabled = True
        await self._nursery.start(self._run, managed, listeners)
        log.info(
            "chaos control: proxy %s (%s) listening on %s, upstream %s",
            managed.name,
            managed.protocol,
            managed.listen,
            managed.upstream,
        )

    async def _run(
        self,
        managed: ManagedProxy,
        listeners: list[trio.SocketListener],
        task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
    ) -> None:
        assert managed.scope is not None and managed.done is not None
        try:
            with managed.scope:
                await managed.proxy.serve(listeners, task_status=task_status)
        finally:
            for lst in listeners:
                await trio.aclose_forcefully(lst)
            managed.done.set()

    async def _stop(self, managed: ManagedProxy) -> None:
        """Stop listening and drop every connection of ``managed``."""
        if not managed.enabled:
            return
        managed.enabled = False
        assert managed.scope is not None and managed.done is not None
        managed.scope.cancel()
        await managed.done.wait()
        managed.proxy.finish()

    async def aclose(self) -> None:
        """Stop every proxy."""
        for managed in list(self.proxies.values()):
            await self._stop(managed)

    # ------------------------------------------------------------------ HTTP

    async def _http_connection(self, stream: trio.SocketStream) -> None:
        conn = h11.Connection(h11.SERVER, max_incomplete_event_size=MAX_HEAD)
        try:
            while True:
                with trio.move_on_after(IDLE_TIMEOUT) as idle:
                    event = await self._next_event(conn, stream)
                if idle.cancelled_caught or isinstance(event, h11.ConnectionClosed):
                    return
                assert isinstance(event, h11.Request)
                status, payload, close = await self._request(conn, stream, event)
                await self._respond(conn, stream, status, payload, close=close)
                if conn.our_state is h11.MUST_CLOSE or conn.their_state is h11.MUST_CLOSE or close:
                    return
                conn.start_next_cycle()
        except h11.RemoteProtocolError as exc:
            if conn.our_state in (h11.IDLE, h11.SEND_RESPONSE):
                code = exc.error_status_hint
                text = "request head too large" if code == 431 else f"bad HTTP request: {exc}"
                with contextlib.suppress(
                    trio.BrokenResourceError, trio.ClosedResourceError, h11.LocalProtocolError, trio.TooSlowError, OSError
                ):
                    await self._respond(conn, stream, code, {"error": text, "status": code}, close=True)
        except (trio.BrokenResourceError, trio.ClosedResourceError, h11.LocalProtocolError, trio.TooSlowError, OSError):
            pass
        except Exception:  # a bug here drops this connection, never the server and its proxies
            log.exception("chaos control: a connection of the API failed")
        finally:
            await trio.aclose_forcefully(stream)

    async def _next_event(self, conn: h11.Connection, stream: trio.SocketStream) -> Any:
        while True:
            event = conn.next_event()
            if event is not h11.NEED_DATA:
                return event
            data = await stream.receive_some(65536)
            conn.receive_data(data)

    async def _request(self, conn: h11.Connection, stream: trio.SocketStream, request: h11.Request) -> tuple[int, Any, bool]:
        """Read the body and answer: (status, JSON payload or None, close after it)."""
        headers = {k.lower(): v for k, v in request.headers}
        head = len(request.method) + len(request.target) + sum(len(k) + len(v) + 4 for k, v in request.headers)
        if head > MAX_HEAD:  # h11 bounds a head that arrives in pieces; this one came whole
            return 431, _error(f"request head too large (limit {MAX_HEAD} bytes)", 431), True
        length = headers.get(b"content-length")
        if length is not None and length.isdigit() and int(length) > self.max_body:
            return 413, _error(f"request body too large: {int(length)} bytes (limit {self.max_body})", 413), True
        body = bytearray()
        with trio.fail_after(READ_TIMEOUT):
            while True:
                event = await self._next_event(conn, stream)
                if isinstance(event, h11.Data):
                    body += event.data
                    if len(body) > self.max_body:
                        return 413, _error(f"request body too large (limit {self.max_body} bytes)", 413), True
                elif isinstance(event, h11.EndOfMessage):
                    break
                else:  # ConnectionClosed mid-body
                    raise trio.BrokenResourceError("the client closed mid-request")
        if headers.get(b"user-agent", b"").startswith(b"Mozilla/"):
            return 403, _error("User agent not allowed", 403), False
        try:
            status, payload = await self.handle(
                request.method.decode("ascii", "replace"), request.target.decode("ascii", "replace"), bytes(body)
            )
        except ApiError as exc:
            return exc.status, _error(exc.message, exc.status), False
        except Exception as exc:  # a bug here must not take the control server down
            log.exception("chaos control: %s %s failed", request.method.decode(), request.target.decode())
            return 500, _error(f"internal error: {type(exc).__name__}: {exc}", 500), False
        return status, payload, False

    async def _respond(self, conn: h11.Connection, stream: trio.SocketStream, status: int, payload: Any, *, close: bool) -> None:
        body = b"" if payload is None or status == 204 else json.dumps(payload, default=str).encode() + b"\n"
        headers = [("Server", f"refwire/{__version__}")]
        if status != 204:
            headers += [("Content-Type", "application/json"), ("Content-Length", str(len(body)))]
        if close:
            headers.append(("Connection", "close"))
        with trio.fail_after(READ_TIMEOUT):
            await stream.send_all(conn.send(h11.Response(status_code=status, headers=headers)))
            if body:
                await stream.send_all(conn.send(h11.Data(data=body)))
            await stream.send_all(conn.send(h11.EndOfMessage()))

    # ------------------------------------------------------------------ the API

    async def handle(self, method: str, target: str, body: bytes) -> tuple[int, Any]:
        """Answer one request: (status, JSON payload or None); raises :class:`ApiError`."""
        url = urlsplit(target)
        parts = [unquote(p) for p in url.path.strip("/").split("/")] if url.path.strip("/") else []
        route: tuple[str, ...] = tuple(parts)
        routes: list[tuple[tuple[str, ...], dict[str, Callable[..., Any]]]] = [
            (("version",), {"GET": self._version}),
            (("reset",), {"POST": self._reset}),
            (("populate",), {"POST": self._populate}),
            (("connections",), {"GET": self._connections}),
            (("log",), {"GET": self._get_log}),
            (("proxies",), {"GET": self._proxy_index, "POST": self._proxy_create}),
            (
                ("proxies", "*"),
                {"GET": self._proxy_show, "POST": self._proxy_update, "PATCH": self._proxy_update, "DELETE": self._proxy_delete},
            ),
            (("proxies", "*", "toxics"), {"GET": self._toxic_index, "POST": self._toxic_create}),
            (
                ("proxies", "*", "toxics", "*"),
                {"GET": self._toxic_show, "POST": self._toxic_update, "PATCH": self._toxic_update, "DELETE": self._toxic_delete},
            ),
        ]
        for pattern, methods in routes:
            if len(pattern) != len(route) or any(p not in ("*", r) for p, r in zip(pattern, route, strict=True)):
                continue
            handler = methods.get(method)
            if handler is None:
                raise ApiError(f"method {method} not allowed on {url.path} (allowed: {', '.join(methods)})", 405)
            args = [r for p, r in zip(pattern, route, strict=True) if p == "*"]
            async with self._lock:
                try:
                    result: tuple[int, Any] = await handler(*args, body=body, query=parse_qs(url.query))
                except ToxicError as exc:
                    raise ApiError(str(exc), exc.status) from None
            return result
        raise ApiError(f"no such endpoint: {url.path}", 404)

    async def _version(self, **_: Any) -> tuple[int, Any]:
        return 200, {"version": f"refwire-{__version__}"}

    async def _reset(self, **_: Any) -> tuple[int, Any]:
        for managed in self.proxies.values():
            await self._start(managed)
            managed.proxy.reset_toxics()
        return 204, None

    async def _connections(self, **_: Any) -> tuple[int, Any]:
        return 200, [{"proxy": name, **c} for name, m in self.proxies.items() for c in m.proxy.connections()]

    async def _get_log(self, query: Mapping[str, list[str]], **_: Any) -> tuple[int, Any]:
        raw = query.get("since", ["0"])[-1]
        try:
            since = int(raw)
        except ValueError:
            raise ApiError(f"since must be an integer, got {raw!r}", 400) from None
        first = self._logged - len(self._log)  # the oldest index still held
        entries = [e for e in self._log if e["index"] >= since] if since > first else list(self._log)
        return 200, {"entries": entries, "next": self._logged, "dropped": max(0, first - max(since, 0))}

    async def _proxy_index(self, **_: Any) -> tuple[int, Any]:
        return 200, {name: m.to_json() for name, m in self.proxies.items()}

    def _get(self, name: str) -> ManagedProxy:
        managed = self.proxies.get(name)
        if managed is None:
            raise ApiError("proxy not found", 404)
        return managed

    def _spec(self, raw: Any, where: str = "") -> _Spec:
        if not isinstance(raw, Mapping):
            raise _bad_body("a proxy is a JSON object")
        for key in ("name", "upstream"):
            value = raw.get(key)
            if value is not None and not isinstance(value, str):
                raise _bad_body(f"{key} must be a string, got {value!r}")
            if not value:
                raise _missing(key + where)
        listen = raw.get("listen") or "127.0.0.1:0"
        enabled = raw.get("enabled", True)
        enabled = True if enabled is None else enabled
        protocol = raw.get("protocol") or self.protocol
        seed = raw.get("seed")
        if not isinstance(listen, str) or not isinstance(protocol, str):
            raise _bad_body("listen and protocol must be strings")
        if not isinstance(enabled, bool):
            raise _bad_body(f"enabled must be true or false, got {enabled!r}")
        if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
            raise _bad_body(f"seed must be an integer, got {seed!r}")
        return _Spec(raw["name"], listen, raw["upstream"], protocol, enabled, seed)

    async def _proxy_create(self, body: bytes, **_: Any) -> tuple[int, Any]:
        spec = self._spec(_json(body))
        if spec.name in self.proxies:
            raise ApiError("proxy already exists", 409)
        managed = self._new(spec)
        if spec.enabled:
            await self._start(managed)
        self.proxies[spec.name] = managed
        return 201, managed.to_json()

    async def _populate(self, body: bytes, **_: Any) -> tuple[int, Any]:
        raw = _json(body)
        if not isinstance(raw, list):
            raise _bad_body("populate takes a JSON array of proxies")
        specs = [self._spec(item, f" at proxy {i}") for i, item in enumerate(raw, 1)]
        done: list[ManagedProxy] = []
        try:
            for spec in specs:
                existing = self.proxies.get(spec.name)
                if existing is not None and not _differs(existing, spec):
                    done.append(existing)
                    continue
                if existing is not None:
                    await self._stop(existing)
                    del self.proxies[spec.name]
                managed = self._new(spec)
                if spec.enabled:
                    await self._start(managed)
                self.proxies[spec.name] = managed
                done.append(managed)
        except ApiError as exc:
            return exc.status, {**_error(exc.message, exc.status), "proxies": [m.to_json() for m in done]}
        return 201, {"proxies": [m.to_json() for m in done]}

    async def _proxy_show(self, name: str, **_: Any) -> tuple[int, Any]:
        return 200, self._get(name).to_json()

    async def _proxy_update(self, name: str, body: bytes, **_: Any) -> tuple[int, Any]:
        managed = self._get(name)
        raw = _json(body)
        if not isinstance(raw, Mapping):
            raise _bad_body("a proxy update is a JSON object")
        spec = self._spec(
            {
                "name": name,
                "listen": managed.listen,
                "upstream": managed.upstream,
                "enabled": managed.enabled,
                "protocol": managed.protocol,
                **{k: v for k, v in raw.items() if k in ("listen", "upstream", "enabled")},
            }
        )
        if _differs(managed, spec):
            upstream = _address("upstream", spec.upstream)
            _address("listen", spec.listen)
            await self._stop(managed)
            managed.listen, managed.upstream = spec.listen, spec.upstream
            managed.proxy.upstream = upstream
        if spec.enabled:
            await self._start(managed)
        else:
            await self._stop(managed)
        return 200, managed.to_json()

    async def _proxy_delete(self, name: str, **_: Any) -> tuple[int, Any]:
        managed = self._get(name)
        await self._stop(managed)
        del self.proxies[name]
        return 204, None

    async def _toxic_index(self, name: str, **_: Any) -> tuple[int, Any]:
        return 200, self._get(name).proxy.toxics_json()

    async def _toxic_create(self, name: str, body: bytes, **_: Any) -> tuple[int, Any]:
        proxy = self._get(name).proxy
        return 200, proxy.add_toxic(_json(body)).to_json()

    async def _toxic_show(self, name: str, toxic: str, **_: Any) -> tuple[int, Any]:
        found = self._get(name).proxy.get_toxic(toxic)
        if found is None:
            raise ApiError("toxic not found", 404)
        return 200, found.to_json()

    async def _toxic_update(self, name: str, toxic: str, body: bytes, **_: Any) -> tuple[int, Any]:
        proxy = self._get(name).proxy
        return 200, proxy.update_toxic(toxic, _json(body)).to_json()

    async def _toxic_delete(self, name: str, toxic: str, **_: Any) -> tuple[int, Any]:
        self._get(name).proxy.remove_toxic(toxic)
        return 204, None


def _error(message: str, status: int) -> dict[str, Any]:
    return {"error": message, "status": status}


def _json(body: bytes) -> Any:
    try:
        return json.loads(body or b"null")
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise _bad_body(f"not JSON: {exc}") from None


def _address(what: str, text: str) -> tuple[str, int]:
    try:
        return parse_hostport(text)
    except ValueError as exc:
        raise _bad_body(f"{what}: {exc}") from None


def _differs(managed: ManagedProxy, spec: _Spec) -> bool:
    """As toxiproxy decides whether populate or an update restarts a proxy: another
    listen address (port 0 always differs) or upstream (or, here, protocol)."""
    try:
        listen_differs = parse_hostport(spec.listen) != parse_hostport(managed.listen)
    except ValueError:
        return True
    return listen_differs or spec.upstream != managed.upstream or spec.protocol != managed.protocol


@asynccontextmanager
async def open_control(listen: tuple[str, int] = ("127.0.0.1", 0), **kwargs: Any) -> AsyncIterator[ControlServer]:
    """A control server on ``listen`` (port 0: any; ``server.addresses[0]``) for the
    ``async with`` block; every proxy it runs is stopped at the end::

        async with open_control(seed=7) as control:
            ...  # POST http://{control.addresses[0]}/proxies
    """
    server = ControlServer(**kwargs)
    listeners = await trio.open_tcp_listeners(listen[1], host=listen[0])
    async with trio.open_nursery() as nursery:
        await nursery.start(server.serve, listeners)
        try:
            yield server
        finally:
            await server.aclose()
            nursery.cancel_scope.cancel()

"""Send N events to a Lumberjack v2 server with pylogbeat (PyPI, 2.1.0), in
windows of B events on ONE connection; optional TLS.

    python pylogbeat_send.py HOST PORT N [--batch B] [--tls-ca PEM] [--timeout S]

Event i is ``{"n": i, "message": "pylogbeat event i", "peer": "pylogbeat"}``.
Exit 0 only when every window was acked (pylogbeat's ``send()`` returns only
then); prints one JSON summary line on stdout.

pylogbeat quirks that matter here (read in pylogbeat.py; specs/lumberjack/README.md §7):

* every ``send()`` is one window: ``2W len(batch)`` then ONE ``2C`` holding the
  ``2J`` frames (zlib default level 6) -- always compressed;
* sequence numbers are a RUNNING counter across windows on one client object
  (1..100, 101..200, ...), not 1..n per window;
* it loops until an ack EQUALS its last sequence number (no ``>=``): a server
  acking with the count (go-lumber) hangs it on the 2nd window until the socket
  timeout; ``A 0`` keepalives are fine; the ack's version byte is ignored;
* acks are read with bare ``recv(1), recv(1), recv(4)`` (no loop: an ack split
  across TCP segments would be misread) and the W frame goes out with
  ``socket.send`` (not ``sendall``);
* TLS: ``ssl_enable=True`` + ``ca_certs``; the certificate chain is verified
  but ``check_hostname`` is forced off, and no SNI is sent.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

try:
    import pylogbeat
except ImportError as exc:  # pragma: no cover - reported to the test
    print(f"pylogbeat is not installed: {exc}", file=sys.stderr)
    sys.exit(3)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("host")
    ap.add_argument("port", type=int)
    ap.add_argument("count", type=int)
    ap.add_argument("--batch", type=int, default=100, help="events per window (one pylogbeat send())")
    ap.add_argument("--tls-ca", help="PEM of the CA that signed the server certificate; enables TLS")
    ap.add_argument("--timeout", type=float, default=20.0, help="socket timeout, seconds")
    args = ap.parse_args()

    events = [{"n": i, "message": f"pylogbeat event {i}", "peer": "pylogbeat"} for i in range(args.count)]
    client = pylogbeat.PyLogBeatClient(
        args.host,
        args.port,
        timeout=args.timeout,
        ssl_enable=args.tls_ca is not None,
        ssl_verify=True,
        ca_certs=args.tls_ca,
    )
    t0 = time.monotonic()
    windows = 0
    try:
        with client:
            for i in range(0, len(events), args.batch):
                client.send(events[i : i + args.batch])  # returns once ack == last seq
                windows += 1
    except Exception as exc:
        print(json.dumps({"ok": False, "error": repr(exc), "windows_acked": windows}))
        return 1
    print(
        json.dumps(
            {
                "ok": True,
                "events": args.count,
                "windows_acked": windows,
                "last_seq": client._sequence,  # running counter: == count
                "seconds": round(time.monotonic() - t0, 3),
            }
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())

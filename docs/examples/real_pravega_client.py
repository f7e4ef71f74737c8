"""The real Pravega client from PyPI (``pip install pravega==0.3.8``, Rust core)
writes an event through ``refwire serve pravega``: its controller and segment
store, on free ports."""

import signal
import subprocess

import pravega_client

server = subprocess.Popen(
    ["refwire", "serve", "pravega", "--listen", "127.0.0.1:0", "--controller", "127.0.0.1:0"],
    stderr=subprocess.PIPE,
    text=True,
)
try:
    addresses = {}
    while len(addresses) < 2:  # "listening on HOST:PORT (segment store)", then "(controller)"
        line = server.stderr.readline()
        if line.startswith("listening on"):
            addresses[line.split()[-1].strip("()")] = line.split()[2]
    print("controller at", addresses["controller"])

    m = pravega_client.StreamManager(f"tcp://{addresses['controller']}")
    m.create_scope("sc")
    m.create_stream("sc", "st", 1)
    w = m.create_writer("sc", "st")
    w.write_event("hello")
    w.flush()
    print("written and flushed")
    del w, m  # the client closes its connections, so the server stops at once
finally:
    server.send_signal(signal.SIGINT)  # Ctrl-C
    server.wait(timeout=10)

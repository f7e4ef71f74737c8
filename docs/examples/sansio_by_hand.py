"""Driving the Lumberjack Sans-IO machines by hand: bytes in, events out, time as an input."""

from refwire.errors import RemoteProtocolError
from refwire.lumberjack import NEED_DATA, AckReceived, Batch, ClientConnection, KeepAlive, ServerConnection

client = ClientConnection()
server = ServerConnection(keepalive_interval=5.0)

# The client queues a window; its bytes leave only through data_to_send().
client.send_window([{"msg": "a"}, {"msg": "b"}], now=0.0)
wire = client.data_to_send()
print("client sends", len(wire), "bytes")

# Bytes may arrive in any pieces: here one at a time.
for i in range(len(wire)):
    server.receive_data(wire[i : i + 1], now=0.0)
batch = server.next_event()
assert isinstance(batch, Batch) and server.next_event() is NEED_DATA
print("server got", [event.fields() for event in batch.events])

# While the application holds the batch, the server owes keepalives: the
# machine says when its next timer is due; the caller sleeps until then.
deadline = server.next_deadline()
print("next timer at", deadline)
server.handle_timer(now=deadline)
client.receive_data(server.data_to_send(), now=deadline)
assert isinstance(client.next_event(), KeepAlive)  # A 0: not an ack

# The application has stored the batch: ack it.
server.accept(batch, now=6.0)
client.receive_data(server.data_to_send(), now=6.0)
ack = client.next_event()
assert isinstance(ack, AckReceived) and ack.complete
print(ack)

# Malformed input: the events before the bad byte come out first, then the error.
server = ServerConnection()
server.receive_data(bytes.fromhex("325700000001") + b"2X", now=0.0)  # W 1, then an unknown frame type
try:
    server.next_event()
except RemoteProtocolError as err:
    print("refused:", err)
print("state:", server.state, "| transitions reached:", len(server.transitions_seen))

"""The Pravega Sans-IO pieces by hand: a writer session, the client and
segment-store machines, one event appended and acknowledged."""

import uuid

from refwire.pravega import NULL_VALUE, AppendBytes, ClientConnection, ServerConnection, WriterSession
from refwire.pravega.frames import AppendSetup

client, server = ClientConnection(), ServerConnection()
session = WriterSession("sc/st/0.#epoch.0", uuid.uuid4())   # the writer id is an input: the driver draws it
session.add(b"hello")
client.initiate(now=0.0)                                     # Hello; bytes leave only via data_to_send()
client.send(session.setup(request_id=1), now=0.0)            # SetupAppend
server.receive_data(client.data_to_send(), now=0.0)
server.next_event()                                          # HelloReceived(high_version=17, low_version=5, compatible=True)
setup = server.next_event().command                          # RequestReceived(SetupAppend(...))
server.send(AppendSetup(request_id=1, segment=setup.segment, writer_id=setup.writer_id, last_event_number=NULL_VALUE), now=0.0)
client.receive_data(server.data_to_send(), now=0.0)
client.next_event()                                          # HelloReceived(...)
session.on_append_setup(client.next_event().command)         # ReplyReceived(AppendSetup(...))
client.send(AppendBytes(session.take()), now=0.0)            # the session's AppendBlockEnd
server.receive_data(client.data_to_send(), now=0.0)
append = server.next_event()                                 # Append(..., event_number=1, event_count=1, ...)
server.append_stored(append, segment_length=13, now=0.0)     # once durable: queues DataAppended
client.receive_data(server.data_to_send(), now=0.0)
print(session.on_data_appended(client.next_event().command))  # [1]

"""The Pravega segment-store wire protocol (specs/pravega/README.md).

* :mod:`.frames` (+ :mod:`.frames_codec`) -- every v17 wire command, byte-exact with Pravega;
* :mod:`.connection` -- Sans-IO server and client machines (append reassembly,
  writer state, Hello/KeepAlive);
* :mod:`.writer` -- the Sans-IO writer session (exactly once across reconnects);
* :mod:`.store` / :mod:`.storage` / :mod:`.service` -- the segment store's state,
  durable log and replies;
* :mod:`.server` / :mod:`.client` -- trio drivers; :mod:`.controller` -- a minimal
  gRPC controller so the real ``pravega`` client can find the store.
"""

from ..sansio import NEED_DATA
from .connection import Append, AppendBytes, ClientConnection, ServerConnection
from .frames import (
    DEFAULT_LIMITS,
    MAX_WIRECOMMAND_SIZE,
    NULL_VALUE,
    OLDEST_COMPATIBLE_VERSION,
    WIRE_VERSION,
    Command,
    CommandDecoder,
    decode_command,
    encode_command,
    encode_event,
    request_id_of,
)
from .writer import WriterSession

__all__ = [
    "DEFAULT_LIMITS",
    "MAX_WIRECOMMAND_SIZE",
    "NULL_VALUE",
    "OLDEST_COMPATIBLE_VERSION",
    "NEED_DATA",
    "WIRE_VERSION",
    "Append",
    "AppendBytes",
    "ClientConnection",
    "Command",
    "CommandDecoder",
    "ServerConnection",
    "WriterSession",
    "decode_command",
    "encode_command",
    "encode_event",
    "request_id_of",
]

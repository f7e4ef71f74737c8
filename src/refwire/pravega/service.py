"""The service behind the server machine: what a segment store answers
(specs/pravega/README.md §5.4, §6, §8, §9), Java's ``PravegaRequestProcessor``
and ``AppendProcessor`` replies, as pure functions of a request and the
:class:`~.store.SegmentStore`.  A core: no I/O, no clock (``now`` comes in).

Each request gives an :class:`Outcome`: the reply, the log position that must
be durable before it is sent, whether the connection must then close, or that
a read must wait at the tail.  The trio server (and the simulator) apply it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Literal

import attrs

from .errors import (
    BadAttributeError,
    BadKeyVersionError,
    BadOffsetError,
    IllegalArgumentError,
    KeyDoesNotExistError,
    NoSuchSegmentError,
    SegmentExistsError,
    SegmentSealedError,
    SegmentTruncatedError,
    StoreError,
    TableNotEmptyError,
)
from .events import Append
from .frames import (
    NULL_VALUE,
    AppendSetup,
    AuthTokenCheckFailed,
    Command,
    CreateSegment,
    CreateTableSegment,
    DeleteSegment,
    DeleteTableSegment,
    ErrorMessage,
    GetSegmentAttribute,
    GetStreamSegmentInfo,
    InvalidEventNumber,
    NoSuchSegment,
    OperationUnsupported,
    ReadSegment,
    ReadTable,
    ReadTableEntries,
    ReadTableEntriesDelta,
    ReadTableKeys,
    RemoveTableKeys,
    SealSegment,
    SegmentAlreadyExists,
    SegmentAttribute,
    SegmentAttributeUpdated,
    SegmentCreated,
    SegmentDeleted,
    SegmentIsSealed,
    SegmentIsTruncated,
    SegmentPolicyUpdated,
    SegmentRead,
    SegmentSealed,
    SegmentTruncated,
    SetupAppend,
    StreamSegmentInfo,
    TableEntriesDeltaRead,
    TableEntriesRead,
    TableEntriesUpdated,
    TableKeyBadVersion,
    TableKeyDoesNotExist,
    TableKeysRead,
    TableKeysRemoved,
    TableRead,
    TableSegmentNotEmpty,
    TruncateSegment,
    UpdateSegmentAttribute,
    UpdateSegmentPolicy,
    UpdateTableEntries,
    WrongHost,
)
from .store import SegmentStore

__all__ = ["AppendOutcome", "Outcome", "SegmentStoreService", "TokenVerifier", "TokenVerdict"]

TokenVerdict = Literal["ok", "invalid", "expired"]
#: ``verify(resource, token, write)``: "ok", "invalid" or "expired" (§8).
TokenVerifier = Callable[[str, str, bool], TokenVerdict]


@attrs.frozen
class Outcome:
    reply: Command | None = None
    lsn: int = 0  #: send the reply once the log is durable up to here
    close: bool = False  #: close the connection after the reply
    park: bool = False  #: a read at the tail: retry when the segment changes


@attrs.frozen
class AppendOutcome:
    """``ok``: acked with DataAppended once ``lsn`` is durable; ``conditional``:
    ConditionalCheckFailed; ``failed``: ``reply`` then drop the writer state;
    ``close``: ``reply`` (if any) then close the connection."""

    kind: Literal["ok", "conditional", "failed", "close"]
    lsn: int = 0
    length: int = 0
    reply: Command | None = None


class SegmentStoreService:
    """Answers requests against one :class:`SegmentStore`.

    Args:
        verifier: checks delegation tokens; None = auth off (any token, even "").
        owns: which segments this store owns; others get WrongHost.
        read_only: appends and mutations get OperationUnsupported.
        stack_traces: fill ``serverStackTrace`` (Pravega's replyWithStackTraceOnError).
    """

    def __init__(
        self,
        store: SegmentStore,
        *,
        verifier: TokenVerifier | None = None,
        owns: Callable[[str], bool] | None = None,
        read_only: bool = False,
        stack_traces: bool = False,
    ) -> None:
        self.store = store
        self.verifier = verifier
        self.owns = owns
        self.read_only = read_only
        self.stack_traces = stack_traces

    def _trace(self, exc: BaseException) -> str:
        return f"{type(exc).__name__}: {exc}" if self.stack_traces else ""

    def _check_token(self, segment: str, token: str, write: bool, request_id: int) -> Outcome | None:
        if self.verifier is None:
            return None
        verdict = self.verifier(segment, token, write)
        if verdict == "ok":
            return None
        return Outcome(
            AuthTokenCheckFailed(request_id=request_id, error_code=1 if verdict == "expired" else 0), close=verdict == "expired"
        )

    # -- requests -------------------------------------------------------------
    def process(self, cmd: Command, *, now: int = 0, was_parked: bool = False) -> Outcome:
        """The outcome of one request (not appends: see :meth:`append`)."""
        segment = str(getattr(cmd, "segment", None) or getattr(cmd, "segment_name", ""))
        rid = int(getattr(cmd, "request_id", -1))
        token = getattr(cmd, "delegation_token", "")
        if self.owns is not None and not self.owns(segment):
            return Outcome(WrongHost(request_id=rid, segment=segment, correct_host=""))
        write = not isinstance(
            cmd,
            ReadSegment
            | GetStreamSegmentInfo
            | GetSegmentAttribute
            | ReadTable
            | ReadTableKeys
            | ReadTableEntries
            | ReadTableEntriesDelta,
        )
        # Quirk copied from Pravega (§6): a refused read carries the read *offset* as its requestId.
        denied = self._check_token(segment, token, write, cmd.offset if isinstance(cmd, ReadSegment) else rid)
        if denied is not None:
            return denied
        if write and self.read_only and not isinstance(cmd, SetupAppend):
            return Outcome(OperationUnsupported(request_id=rid, operation_name=type(cmd).__name__))
        try:
            return self._dispatch(cmd, rid, segment, now=now, was_parked=was_parked)
        except NoSuchSegmentError as exc:
            offset = cmd.offset if isinstance(cmd, ReadSegment) else -1
            return Outcome(NoSuchSegment(request_id=rid, segment=segment, server_stack_trace=self._trace(exc), offset=offset))
        except SegmentExistsError as exc:
            return Outcome(SegmentAlreadyExists(request_id=rid, segment=segment, server_stack_trace=self._trace(exc)))
        except SegmentSealedError as exc:
            return Outcome(SegmentIsSealed(request_id=rid, segment=segment, server_stack_trace=self._trace(exc), offset=-1))
        except SegmentTruncatedError as exc:
            offset = cmd.offset if isinstance(cmd, ReadSegment) else -1
            return Outcome(
                SegmentIsTruncated(
                    request_id=rid,
                    segment=segment,
                    start_offset=exc.start_offset,
                    server_stack_trace=self._trace(exc),
                    offset=offset,
                )
            )
        except BadKeyVersionError as exc:
            return Outcome(TableKeyBadVersion(request_id=rid, segment=segment, server_stack_trace=self._trace(exc)))
        except KeyDoesNotExistError as exc:
            return Outcome(TableKeyDoesNotExist(request_id=rid, segment=segment, server_stack_trace=self._trace(exc)))
        except TableNotEmptyError as exc:
            return Outcome(TableSegmentNotEmpty(request_id=rid, segment=segment, server_stack_trace=self._trace(exc)))
        except BadOffsetError as exc:
            # handleException: BadOffsetException -> SegmentIsTruncated(expected = the current length) (§8)
            return Outcome(
                SegmentIsTruncated(
                    request_id=rid,
                    segment=segment,
                    start_offset=exc.actual,
                    server_stack_trace=self._trace(exc),
                    offset=exc.given,
                )
            )
        except IllegalArgumentError as exc:
            return Outcome(ErrorMessage(request_id=rid, segment=segment, message=str(exc), error_code=0))

    def _dispatch(self, cmd: Command, rid: int, segment: str, *, now: int, was_parked: bool) -> Outcome:
        st = self.store
        if isinstance(cmd, SetupAppend):
            # A sealed segment still gets AppendSetup (§5.4).
            last = st.writer_attribute(segment, cmd.writer_id)
            return Outcome(AppendSetup(request_id=rid, segment=segment, writer_id=cmd.writer_id, last_event_number=last))
        if isinstance(cmd, ReadSegment):
            result = st.read(segment, cmd.offset, cmd.suggested_length)
            if result is None:
                return Outcome(park=True)
            if was_parked and result.end_of_segment and not result.data:
                # Sealed while the read waited at the tail (§6).
                return Outcome(SegmentIsSealed(request_id=rid, segment=segment, offset=cmd.offset))
            return Outcome(
                SegmentRead(
                    segment=segment,
                    offset=cmd.offset,
                    at_tail=result.at_tail,
                    end_of_segment=result.end_of_segment,
                    data=result.data,
                    request_id=rid,
                )
            )
        if isinstance(cmd, GetStreamSegmentInfo):
            seg = st.get(segment)
            return Outcome(
                StreamSegmentInfo(
                    request_id=rid,
                    segment_name=segment,
                    exists=True,
                    is_sealed=seg.sealed_visible,
                    is_deleted=False,
                    last_modified=seg.last_modified,
                    write_offset=seg.visible,
                    start_offset=seg.start_offset,
                )
            )
        if isinstance(cmd, CreateSegment):
            return Outcome(SegmentCreated(request_id=rid, segment=segment), lsn=st.create(segment, now=now))
        if isinstance(cmd, CreateTableSegment):
            return Outcome(SegmentCreated(request_id=rid, segment=segment), lsn=st.create(segment, table=True, now=now))
        if isinstance(cmd, SealSegment):
            if st.get(segment).sealed:
                raise SegmentSealedError(segment)
            return Outcome(SegmentSealed(request_id=rid, segment=segment), lsn=st.seal(segment, now=now))
        if isinstance(cmd, DeleteSegment):
            return Outcome(SegmentDeleted(request_id=rid, segment=segment), lsn=st.delete(segment, now=now))
        if isinstance(cmd, DeleteTableSegment):
            if cmd.must_be_empty and st._table(segment).table:
                raise TableNotEmptyError(segment)
            return Outcome(SegmentDeleted(request_id=rid, segment=segment), lsn=st.delete(segment, now=now))
        if isinstance(cmd, TruncateSegment):
            return Outcome(
                SegmentTruncated(request_id=rid, segment=segment), lsn=st.truncate(segment, cmd.truncation_offset, now=now)
            )
        if isinstance(cmd, UpdateSegmentPolicy):
            st.get(segment)
            return Outcome(SegmentPolicyUpdated(request_id=rid, segment=segment))
        if isinstance(cmd, GetSegmentAttribute):
            value = st.get(segment).attributes.get(cmd.attribute_id, NULL_VALUE)
            return Outcome(SegmentAttribute(request_id=rid, value=value))
        if isinstance(cmd, UpdateSegmentAttribute):
            lsn, ok = st.update_attribute(segment, cmd.attribute_id, cmd.new_value, cmd.expected_value, now=now)
            return Outcome(SegmentAttributeUpdated(request_id=rid, success=ok), lsn=lsn)
        if isinstance(cmd, UpdateTableEntries):
            lsn, versions = st.table_update(segment, cmd.table_entries, cmd.table_segment_offset, now=now)
            return Outcome(TableEntriesUpdated(request_id=rid, updated_versions=tuple(versions)), lsn=lsn)
        if isinstance(cmd, RemoveTableKeys):
            lsn = st.table_remove(segment, cmd.keys, cmd.table_segment_offset, now=now)
            return Outcome(TableKeysRemoved(request_id=rid, segment=segment), lsn=lsn)
        if isinstance(cmd, ReadTable):
            return Outcome(TableRead(request_id=rid, segment=segment, entries=tuple(st.table_get(segment, cmd.keys))))
        if isinstance(cmd, ReadTableEntriesDelta):
            entries, end, last = st.table_delta(segment, cmd.from_position, cmd.suggested_entry_count)
            return Outcome(
                TableEntriesDeltaRead(
                    request_id=rid,
                    segment=segment,
                    entries=tuple(entries),
                    should_clear=False,
                    reached_end=end,
                    last_position=last,
                )
            )
        if isinstance(cmd, ReadTableKeys | ReadTableEntries):
            count = cmd.suggested_key_count if isinstance(cmd, ReadTableKeys) else cmd.suggested_entry_count
            entries, token = st.table_entries(segment, cmd.continuation_token or None, count)
            if isinstance(cmd, ReadTableKeys):
                return Outcome(
                    TableKeysRead(request_id=rid, segment=segment, keys=tuple(e.key for e in entries), continuation_token=token)
                )
            return Outcome(TableEntriesRead(request_id=rid, segment=segment, entries=tuple(entries), continuation_token=token))
        return Outcome(OperationUnsupported(request_id=rid, operation_name=type(cmd).__name__))

    # -- appends (§5.4) ---------------------------------------------------------
    def append(self, a: Append, *, now: int = 0) -> AppendOutcome:
        if self.read_only:
            return AppendOutcome("failed", reply=OperationUnsupported(request_id=a.request_id, operation_name="appending data"))
        try:
            lsn, length = self.store.append(
                a.segment,
                a.data,
                writer_id=a.writer_id,
                event_number=a.event_number,
                event_count=a.event_count,
                expected_offset=a.expected_offset,
                expected_attribute=a.previous_stored,
                now=now,
            )
        except BadOffsetError:
            return AppendOutcome("conditional")
        except SegmentSealedError as exc:
            # Quirk copied from Pravega: the offset field carries the event number (§8).
            return AppendOutcome(
                "failed",
                reply=SegmentIsSealed(
                    request_id=a.request_id, segment=a.segment, server_stack_trace=self._trace(exc), offset=a.event_number
                ),
            )
        except NoSuchSegmentError as exc:
            return AppendOutcome(
                "failed",
                reply=NoSuchSegment(request_id=a.request_id, segment=a.segment, server_stack_trace=self._trace(exc), offset=-1),
            )
        except BadAttributeError as exc:
            return AppendOutcome(
                "close",
                reply=InvalidEventNumber(
                    writer_id=a.writer_id,
                    request_id=a.request_id,
                    server_stack_trace=self._trace(exc),
                    event_number=a.event_number,
                ),
            )
        except StoreError as exc:
            return AppendOutcome(
                "failed", reply=ErrorMessage(request_id=a.request_id, segment=a.segment, message=str(exc), error_code=0)
            )
        return AppendOutcome("ok", lsn=lsn, length=length)

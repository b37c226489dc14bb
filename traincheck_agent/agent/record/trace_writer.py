"""The per-process trace writer: the training thread appends, a daemon thread writes.

``emit`` is on the training hot path, so it only appends the record to a list (atomic under the
GIL) and, when the list is long, sets an Event. Serialisation with orjson and all file I/O happen
on a background daemon thread or in an explicit ``flush``. The writer takes records off the
*front* of the same list (``buf[:n]`` then ``del buf[:n]``), never swapping lists, so an append
that races with a drain is never lost.

Each batch is written as whole lines with one ``os.write`` loop on an unbuffered descriptor, so a
process killed mid-write leaves at most one torn last line (the reader skips it), and a forked
child has no user-space buffer it could flush a second time into the parent's file.

The writer never stops training: an unwritable directory, a full disk or an unserialisable value
costs one warning and the records concerned, nothing more.

In check mode a *sink* (the online checker) receives every batch, header first and in order, on
the same background thread (or in ``flush``); the file is then optional. ``close`` closes the
sink after the last batch, so the checker finishes on everything that was recorded.

``install_flush_on_exit`` (in ``process_hooks``) flushes at exit (atexit covers ``sys.exit``,
uncaught exceptions and Ctrl-C) and on SIGTERM, after which the process still dies of SIGTERM.
``os._exit`` and SIGKILL lose what is still buffered (at most one flush interval).
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

import orjson

from traincheck_agent import faults
from traincheck_agent.agent.process.hooks import (
    SIGTERM_FLUSH_TIMEOUT_S,
    arm_sigterm_flush,
    install_flush_on_exit,
    live_writers,
    register_multiprocessing_exit,
)
from traincheck_agent.agent.runtime import report_agent_error
from traincheck_agent.exception_text import exception_text
from traincheck_agent.messages import warn_once
from traincheck_agent.output_files import make_output_dir, open_append
from traincheck_agent.trace.schema import KIND_HEADER, KIND_NOTE, SCHEMA_VERSION, trace_file_name

_DUMPS_OPTIONS = orjson.OPT_NON_STR_KEYS | orjson.OPT_APPEND_NEWLINE
# The buffer may grow past flush_max_records while the writer is busy; past this many times that
# size records are dropped (and counted in a note) rather than letting memory grow without bound.
_HARD_CAP_FACTOR = 100
_MIN_HARD_CAP = 200_000
# At a training step's end the writer thread is woken once records of this weight wait (see step_ended).
STEP_BATCH_MIN = 512
# Most records serialised per write; between chunks a timed flush checks its deadline.
_DRAIN_CHUNK = 50_000


# Stands in for the writer thread when none could be started, so that emit stops trying.
_NOT_STARTED = threading.Thread(target=None, name="traincheck-trace-writer-not-started")


def _to_str(value: Any) -> str:
    """orjson ``default``: anything it cannot serialise natively is written as its ``str``."""
    return str(value)


class RecordSink(Protocol):
    """Receives the records of this process in order, header first, off the training thread."""

    def consume(self, records: list[dict]) -> None: ...

    def close(self) -> None: ...

    def after_fork(self) -> None: ...


class TraceWriter:
    """Buffers trace records in memory and writes them to one JSON-lines file per process."""

    def __init__(
        self,
        out_dir: Path,
        header_provider: Callable[[], dict],
        *,
        flush_interval_s: float = 0.5,
        flush_max_records: int = 2000,
        write_file: bool = True,
        sink: RecordSink | None = None,
        close_timeout_s: float = 5.0,
        max_bytes: int | None = None,
    ) -> None:
        self._out_dir = Path(out_dir)
        self._header_provider = header_provider
        self._interval = max(0.001, float(flush_interval_s))
        self._max_records = max(1, int(flush_max_records))
        self._hard_cap = max(_MIN_HARD_CAP, _HARD_CAP_FACTOR * self._max_records)
        self._write_file = write_file
        self._sink = sink
        self._close_timeout = close_timeout_s
        self._max_bytes = max_bytes if max_bytes and max_bytes > 0 else None
        self._closed = False
        self._reset()
        live_writers.add(self)

    def _reset(self) -> None:
        """Fresh per-process state: used at construction and in a forked child."""
        self._buffer: list[dict] = []
        # The buffer's weight (records, a snapshot counting its variables): added to by the
        # threads that record, set back to 0 when a drain empties the buffer. An update lost
        # between threads only moves a wake-up by a record or two.
        self._held = 0
        self._accepting = not self._closed
        self._wake = threading.Event()
        self._io_lock = threading.Lock()
        self._io_owner: int | None = None
        self._start_lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._sigterm_armed = False  # until the SIGTERM flush is settled from the main thread
        self._stopping = False
        self._disabled = False
        self._fd: int | None = None
        self._path: Path | None = None
        self._header: dict[str, Any] | None = None
        self._sink_has_header = False
        self._dropped_full = 0  # incremented on the hot path
        self._dropped_unserialisable = 0
        self._reported_full = 0
        self._reported_unserialisable = 0
        self._written = 0  # bytes in this process's file
        self._dropped_capped = 0  # records not written since the file reached max_bytes

    # ----------------------------------------------------------------- hot path

    def emit(self, record: dict, weight: int = 1) -> None:
        """Queue one record; O(1), no I/O, never raises (called from the training thread).

        ``weight`` is what the record counts for in the buffer's bounds: a snapshot record
        counts its variables, since it holds as many objects as that many single records."""
        try:
            if not self._accepting:
                return
            held = self._held
            if held >= self._max_records:
                if held >= self._hard_cap:
                    self._dropped_full += 1
                    return
                if not self._wake.is_set():
                    self._wake.set()
            self._buffer.append(record)
            self._held = held + weight
            if self._thread is None:
                self._start_thread()
        except Exception:  # the agent must never break the training step
            pass

    def step_ended(self) -> None:
        """A training step ended: wake the writer thread once enough records wait, so that
        records are written or checked, and freed, within a few steps.

        Records held for the whole flush interval outlive the garbage collector's young
        generations; so many promoted objects trigger full collections, which scan every object
        of the process, torch's included (about 150 ms each, every 250 steps, on the CPU
        example). Handed on within a few steps, the records die young. Waking for every step's
        few records costs more than it saves (measured with the checker process)."""
        try:
            if self._held >= STEP_BATCH_MIN and not self._wake.is_set():
                self._wake.set()
            if not self._sigterm_armed:  # the first record came from another thread
                self._sigterm_armed = arm_sigterm_flush()
        except Exception:  # the agent must never break the training step
            pass

    # ----------------------------------------------------------------- public control

    @property
    def path(self) -> Path | None:
        """The trace file's path once it has been opened, else None."""
        return self._path

    def flush(self, timeout_s: float = 5.0) -> None:
        """Write every buffered record now, waiting at most about ``timeout_s`` seconds."""
        try:
            self._drain(time.monotonic() + max(0.0, timeout_s))
        except Exception as exc:  # contained: flushing is best effort
            report_agent_error("writer", exc)

    def close(self, timeout_s: float | None = None) -> None:
        """Flush, stop the background thread, close the file and the sink; later emits are
        ignored. ``timeout_s`` bounds the flush (default: the writer's close timeout)."""
        if self._closed:
            return
        if timeout_s is None:
            timeout_s = self._close_timeout
        deadline = time.monotonic() + max(0.0, timeout_s)
        self._closed = True
        self._accepting = False  # first, so that nothing lands behind the final flush
        self.flush(timeout_s)
        self._stopping = True
        self._wake.set()
        thread = self._thread
        if thread is not None and thread.is_alive() and thread is not threading.current_thread():
            thread.join(max(0.0, deadline - time.monotonic()))
        if self._io_lock.acquire(timeout=max(0.0, deadline - time.monotonic())):
            try:
                self._write_cap_note()
                self._close_fd()
            finally:
                self._io_lock.release()
        sink, self._sink = self._sink, None
        if sink is not None:
            try:
                sink.close()
            except Exception as exc:  # contained: the training has ended, the exit goes on
                warn_once(f"sink-close-{id(self)}", f"the checker failed to finish: {exception_text(exc)}")

    # ----------------------------------------------------------------- background thread

    def _start_thread(self) -> None:
        with self._start_lock:
            if self._thread is not None or not self._accepting:
                return
            thread = threading.Thread(target=self._run, name="traincheck-trace-writer", daemon=True)
            try:
                thread.start()
            except RuntimeError:  # interpreter shutting down: explicit flushes still work
                self._thread = _NOT_STARTED
                return
            self._thread = thread
            register_multiprocessing_exit(self)
            self._sigterm_armed = arm_sigterm_flush()  # a forked child arms its own once it traces

    def _run(self) -> None:
        while not self._stopping and not self._disabled:
            self._wake.wait(self._interval)
            self._wake.clear()
            if self._stopping:
                break
            try:
                self._drain(None)
            except Exception as exc:  # keep the thread alive; the next round may succeed
                report_agent_error("writer", exc)

    # ----------------------------------------------------------------- draining

    def _drain(self, deadline: float | None) -> None:
        """Take batches off the front of the buffer and write them, under the I/O lock."""
        me = threading.get_ident()
        if self._disabled:
            return
        if self._io_owner == me:  # e.g. SIGTERM arrived while this thread was flushing
            return
        if deadline is None:
            got = self._io_lock.acquire()
        else:
            got = self._io_lock.acquire(timeout=max(0.0, deadline - time.monotonic()))
        if not got:
            return
        self._io_owner = me
        try:
            while True:
                buf = self._buffer
                # Large chunks: ``del buf[:n]`` moves what is left, so small ones cost O(len^2).
                n = min(len(buf), _DRAIN_CHUNK)
                if n == len(buf):
                    self._held = 0
                if n == 0 and not self._has_unreported_drops():
                    return
                batch = buf[:n]
                del buf[:n]
                if not self._write_batch(batch):
                    return
                if deadline is not None and time.monotonic() >= deadline:
                    return
        finally:
            self._io_owner = None
            self._io_lock.release()

    def _has_unreported_drops(self) -> bool:
        return (
            self._dropped_full != self._reported_full
            or self._dropped_unserialisable != self._reported_unserialisable
        )

    def _serialise(self, batch: list[dict]) -> bytearray:
        # Appending to one bytearray lets each dumps() result be freed at once; keeping a list of
        # them to join costs an order of magnitude more (every result stays a fresh allocation).
        out = bytearray()
        dumps = orjson.dumps
        for record in batch:
            if not isinstance(record, dict):  # a non-object line would make the file unreadable
                self._dropped_unserialisable += 1
                warn_once(f"trace-not-dict-{id(self)}", "a trace record was not a dict; dropped")
                continue
            try:
                out += dumps(record, default=_to_str, option=_DUMPS_OPTIONS)
            except Exception as exc:  # e.g. an int beyond 64 bits, a cycle, a str() that raises
                self._dropped_unserialisable += 1
                warn_once(
                    f"trace-unserialisable-{id(self)}",
                    f"a trace record could not be serialised and was dropped ({exc})",
                )
        for note in self._drop_notes():
            out += note
        return out

    def _drop_notes(self) -> list[bytes]:
        notes: list[bytes] = []
        for reason, dropped, reported_attr in (
            ("buffer_full", self._dropped_full, "_reported_full"),
            ("unserialisable", self._dropped_unserialisable, "_reported_unserialisable"),
        ):
            new = dropped - getattr(self, reported_attr)
            if new <= 0:
                continue
            setattr(self, reported_attr, dropped)
            note = {
                "kind": KIND_NOTE,
                "what": "dropped_records",
                "reason": reason,
                "count": new,
                "t_ns": time.time_ns(),
            }
            notes.append(orjson.dumps(note, option=_DUMPS_OPTIONS))
        return notes

    def _header_record(self) -> dict[str, Any] | None:
        """This process's header, built once (after a fork, again); None when disabled."""
        if self._header is None:
            header: dict[str, Any] = {"kind": KIND_HEADER, "schema": SCHEMA_VERSION}
            try:
                header.update(self._header_provider())
            except Exception as exc:
                self._disable(f"trace header could not be built ({exception_text(exc)}); tracing stopped")
                return None
            header["kind"] = KIND_HEADER
            header["pid"] = os.getpid()  # the provider may have cached the parent's pid before a fork
            self._header = header
        return self._header

    def _feed_sink(self, batch: list[dict]) -> bool:
        """Hand one batch to the sink (header first); False when the writer has been disabled."""
        sink = self._sink
        if sink is None:
            return True
        if not self._sink_has_header:
            header = self._header_record()
            if header is None:
                return False
            self._sink_has_header = True
            batch = [header, *batch]
        if batch:
            try:
                sink.consume(batch)
            except Exception as exc:  # the sink contains its own errors; this is a last guard
                warn_once(f"sink-{id(self)}", f"the checker failed on a batch of records: {exception_text(exc)}")
        return True

    def _write_batch(self, batch: list[dict]) -> bool:
        """Append one batch to the file and hand it to the sink; False when disabled."""
        if faults.armed:
            faults.fire("writer")
        if not self._write_file:
            if not self._feed_sink(batch):
                return False
            self._note_drops_without_file()
            return True
        if self._dropped_capped:  # the file is full: the records still reach the sink
            self._dropped_capped += len(batch)
            return self._feed_sink(batch)
        data: bytes | bytearray = self._serialise(batch)  # before the sink sees the records, whatever it does with them
        if not self._feed_sink(batch):
            return False
        if not data or not self._write_file:
            return True
        header = b""
        if self._fd is None:
            opened = self._open()
            if opened is None:
                return not self._disabled  # with a sink, only the file stopped
            header = opened
        if self._max_bytes is not None and self._written + len(header) + len(data) > self._max_bytes:
            # The whole lines that still fit are written, so the file keeps the longest beginning
            # of the run the limit allows, whatever the batches were; at least the header, so
            # that it stays readable.
            cut = data.rfind(b"\n", 0, max(0, self._max_bytes - self._written - len(header))) + 1
            self._start_capping(data.count(b"\n", cut))
            data = data[:cut]
        data = header + data
        try:
            write_all(self._fd, data)
            self._written += len(data)
        except OSError as exc:
            # A partial write may have left a torn line; writing more after it would turn it into
            # a corrupt line in the middle of the file, so stop here.
            self._disable_file(f"cannot write trace file {self._path}: {exc}; tracing stopped")
            return not self._disabled
        return True

    def _start_capping(self, records: int) -> None:
        self._dropped_capped = records
        warn_once(f"trace-capped-{id(self)}",
                  f"trace file {self._path} reached the size limit ({(self._max_bytes or 0) / 2**20:.4g} MiB, "
                  "TRAINCHECK_MAX_TRACE_MB); later records of this process are not written (their number "
                  "goes into a note at the end of the file)")

    def _write_cap_note(self) -> None:
        """At close: one note after the last written line saying how many records the size limit
        kept out of the file (the note itself may pass the limit by its one line)."""
        if not self._dropped_capped or self._fd is None:
            return
        note = {"kind": KIND_NOTE, "what": "dropped_records", "reason": "size_limit",
                "count": self._dropped_capped, "t_ns": time.time_ns()}
        with contextlib.suppress(OSError):
            write_all(self._fd, orjson.dumps(note, option=_DUMPS_OPTIONS))
        self._dropped_capped = 0

    def _note_drops_without_file(self) -> None:
        """Without a file there is no note to write: say it once on stderr instead."""
        if self._has_unreported_drops():
            self._reported_full = self._dropped_full
            self._reported_unserialisable = self._dropped_unserialisable
            warn_once(f"trace-drops-{id(self)}", "the checker fell behind the training; records were dropped "
                      "unchecked (the violation log may miss some)")

    def _open(self) -> bytes | None:
        """Open the trace file; return the serialised header line, or None when disabled."""
        header = self._header_record()
        if header is None:
            return None
        pid = header["pid"]
        run_id = str(header.get("run_id") or "unknown").replace(os.sep, "_")
        rank = header.get("rank")
        name = trace_file_name(run_id, rank if isinstance(rank, int) else 0, pid)
        path = self._out_dir / name
        try:
            line = orjson.dumps(header, default=_to_str, option=_DUMPS_OPTIONS)
        except Exception as exc:
            self._disable_file(f"trace header could not be serialised ({exc}); tracing stopped")
            return None
        try:
            make_output_dir(self._out_dir)
            self._fd = open_append(path)
        except OSError as exc:
            self._disable_file(f"cannot write traces to {path}: {exc}; records are discarded")
            return None
        self._path = path
        return line

    def _disable_file(self, message: str) -> None:
        """The file cannot be written: without a sink the writer stops; with one (check mode)
        only the file does and the checker goes on."""
        if self._sink is None:
            self._disable(message)
            return
        warn_once(f"trace-file-disabled-{id(self)}", message)
        self._write_file = False
        self._close_fd()

    def _disable(self, message: str) -> None:
        warn_once(f"trace-disabled-{id(self)}", message)
        self._disabled = True
        self._accepting = False
        self._buffer.clear()
        self._close_fd()

    def _close_fd(self) -> None:
        fd, self._fd = self._fd, None
        if fd is not None:
            with contextlib.suppress(OSError):
                os.close(fd)

    # ----------------------------------------------------------------- fork

    def _after_fork_in_child(self) -> None:
        """Forget the parent's buffer, thread, locks and descriptor; open our own file later."""
        self._close_fd()  # our copy only; the parent's descriptor is unaffected
        self._reset()
        if self._sink is not None:
            self._sink.after_fork()


def write_all(fd: int | None, data: bytes) -> None:
    """Write all of ``data`` to ``fd`` (a pipe or file may take it in pieces)."""
    if fd is None:
        raise OSError("the file is not open")
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]


__all__ = ["RecordSink", "TraceWriter", "install_flush_on_exit", "SIGTERM_FLUSH_TIMEOUT_S"]

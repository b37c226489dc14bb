"""Check mode inside the training process: load the invariants, choose what to observe, feed
the online checker, log violations and act on them.

The training thread appends records to the trace writer's buffer and, with the checker in this
process, drains it itself at the end of each training step; the writer's background thread hands
on what is recorded between steps. Either way the records reach :class:`CheckSink` header first
and in order; it feeds the
:class:`~traincheck_agent.check.online.OnlineChecker` and writes each violation through a
:class:`~traincheck_agent.report.violations.ViolationLog` (``violations-<rank>.jsonl`` + one
``[traincheck]`` line on stderr). At exit the writer closes the sink: the checker finishes, the
log is closed and one summary line is printed.

``TRAINCHECK_ACTION=raise`` / ``abort`` act at the next *safe point*: the entry of the next
wrapped API call in the main thread. So that this is at most one call after the fault, these
two actions also run the checker in the training thread at the end of every outermost call
(``Runtime.sync_check``): promptness costs speed there, ``log`` keeps checking off the hot path.

Nothing here imports torch. Errors of the checker or of the log are contained: each counts
against the agent's error budget and gets one warning naming the stage.
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

from traincheck_agent import faults
from traincheck_agent.agent.checking.checker_process import CheckerProcess, spare_core
from traincheck_agent.agent.process.dist_info import launcher_facts
from traincheck_agent.check.requirements import (
    SINGLE_PROCESS,
    CallSelection,
    reduce_policy,
    requirements_for,
)
from traincheck_agent.check.waivers import (
    WaiverFileError,
    Waivers,
    read_waivers,
    stale_line,
    waived_mark,
)
from traincheck_agent.errors import TrainCheckViolation, describe_violation
from traincheck_agent.exception_text import exception_text
from traincheck_agent.inference import pack, relations
from traincheck_agent.inference.invariant import Invariant, InvariantFileError, read_invariants
from traincheck_agent.messages import debug, say, warn

if TYPE_CHECKING:
    from traincheck_agent.agent.record.trace_writer import TraceWriter
    from traincheck_agent.policy import Policy
    from traincheck_agent.settings import Settings

# Exit status of a process ended by TRAINCHECK_ACTION=abort (documented in docs/checking.md).
ABORT_EXIT_STATUS = 86
# At exit the checker gets this long to go through what is still buffered.
CLOSE_TIMEOUT_S = 30.0
# Errors of the checker (or the log) after which the sink stops feeding it.
SINK_ERROR_BUDGET = 50
# Stale waivers named one per line at the end of a run; the rest are counted in one more.
STALE_LINES = 5

OnError = Callable[[str, BaseException], None]
# An action runs at a safe point; it returns the exception to raise there, or ends the process.
Action = Callable[[], BaseException | None]
RequestAction = Callable[[Action], None]


# -------------------------------------------------------------------- start-up


def load_invariant_files(paths: Sequence[Path]) -> tuple[list[Invariant], int]:
    """The invariants of every readable file (an invariant in several files once), and how
    many files were usable. A bad file costs one warning naming it and the problem."""
    found: dict[str, Invariant] = {}
    usable = 0
    for named in paths:
        path = pack.resolve(named)
        try:
            invariants = read_invariants(path)
        except InvariantFileError as exc:
            warn(f"invariants file {exc}; this file is skipped")
            continue
        except Exception as exc:  # anything else the reader did not foresee: still one file only
            warn(f"invariants file {path}: cannot be read ({exception_text(exc)}); this file is skipped")
            continue
        usable += 1
        if pack.is_builtin(named):
            mismatch = pack.torch_mismatch(pack.pack_header(path))
            if mismatch:
                say(mismatch)
        for inv in invariants:
            found.setdefault(inv.id, inv)
    return list(found.values()), usable


def load_waivers(path: Path | None) -> Waivers | None:
    """The waivers of TRAINCHECK_WAIVE, or None (after one warning naming the file and the
    problem) when there is no file or it is bad: then no violation is waived."""
    if path is None:
        return None
    try:
        return read_waivers(path)
    except WaiverFileError as exc:
        warn(f"waivers file {exc}; no violation is waived")
    except Exception as exc:  # anything the reader did not foresee: still only the waivers are lost
        warn(f"waivers file {path}: cannot be read ({exception_text(exc)}); no violation is waived")
    return None


class CheckSetup(NamedTuple):
    """What bootstrap needs to start check mode."""

    policy: Policy  # reduced to what the invariants need
    selection: CallSelection
    sink: CheckSink


def prepare_check(settings: Settings, policy: Policy) -> CheckSetup | None:
    """Load the invariants and cut ``policy`` down to them; None (after a warning saying why)
    when there is nothing to check, and the agent then stays off."""
    files = settings.invariant_files
    if not files:
        say(f"check mode without TRAINCHECK_INV: checking the built-in invariants pack "
            f"(TRAINCHECK_INV={pack.BUILTIN}; learn your own with traincheck infer)")
        files = (Path(pack.BUILTIN),)
    invariants, usable = load_invariant_files(files)
    if usable == 0:
        warn("no usable invariants file in TRAINCHECK_INV; the agent stays off")
        return None
    # A launcher says how many ranks there are; without one, the script may still start its own
    # (torch.multiprocessing.spawn): the checker decides when the process group comes up.
    launched = launcher_facts()["world_size"]
    req = requirements_for(invariants, policy, world_size=launched if launched > 1 else None)
    for reason, ids in req.skipped.items():
        shown = ", ".join(ids[:3]) + (", ..." if len(ids) > 3 else "")
        if reason == SINGLE_PROCESS:
            debug(f"check mode: {len(ids)} cross-rank invariants not checked ({reason})")
        else:
            warn(f"{len(ids)} invariant{'' if len(ids) == 1 else 's'} skipped, {reason}: {shown}")
    if not req.checked:
        warn("no invariant to check online in TRAINCHECK_INV; the agent stays off")
        return None
    reduced, not_in_policy = reduce_policy(policy, req)
    debug(f"check mode: {req.summary()}")
    if not_in_policy:
        debug(f"check mode: recorded by the core probes if seen: {', '.join(not_in_policy)}")
    sink = CheckSink(req.checked, out_dir=settings.out_dir, action=settings.action, run_id=settings.run_id,
                     host=settings.host, on_error=_runtime_error, request_action=_runtime_request_action,
                     checker=settings.checker, waivers=load_waivers(settings.waivers_file))
    return CheckSetup(reduced, req.selection(), sink)


def _runtime_error(stage: str, exc: BaseException) -> None:
    from traincheck_agent.agent import runtime

    runtime.report_agent_error(stage, exc)


def runtime_boundary_note() -> str:
    """The training clock's step boundary, where it is not the optimizer's step (for the summary)."""
    from traincheck_agent.agent import runtime

    rt = runtime.current
    return rt.clock.boundary_note() if rt is not None else ""


def _runtime_request_action(action: Action) -> None:
    from traincheck_agent.agent import runtime

    rt = runtime.current
    if rt is not None:
        rt.request_action(action)


# -------------------------------------------------------------------- the sink


TRIAGE_RECORDS = 1000  # violations kept in memory for the end-of-run triage (all go to the log)


class CheckSink:
    """Feeds the records of this process to the online checker (a ``RecordSink`` of the trace
    writer) and handles what it finds."""

    def __init__(self, invariants: Iterable[Invariant], *, out_dir: Path, action: str = "log",
                 run_id: str | None = None, host: str | None = None, on_error: OnError | None = None,
                 request_action: RequestAction | None = None, checker: str = "thread",
                 waivers: Waivers | None = None) -> None:
        self.invariants = list(invariants)
        self.waivers = waivers  # violations they cover are logged as waived, never acted on
        self.by_id = {inv.id: inv for inv in self.invariants}
        self.out_dir = Path(out_dir)
        self.action = action
        # "process": judge in a child process (log only: raise / abort need the verdict in step
        # with the training thread); "thread": in this process (the training thread checks each
        # step's records at its end, the writer's thread what comes between steps); "auto":
        # a process where a core is left over for it.
        if checker == "auto":
            checker = "process" if spare_core() else "thread"
        self.checker_kind = checker if action == "log" else "thread"
        self.run_id = run_id
        self.host = host
        self.on_error = on_error
        self.request_action = request_action
        self.writer: TraceWriter | None = None  # set by bootstrap; abort closes it
        self._reset()

    def _reset(self) -> None:
        self.checker: Any = None  # the in-process checker (all invariants, or the cross-rank ones)
        self.process: CheckerProcess | None = None
        self.header: dict[str, Any] | None = None
        self.log: Any = None
        self._rank_unsettled = False
        self.rank = 0
        self.fed = 0
        self.violations = 0
        self.violated: dict[str, int] = {}
        self.waived = 0  # violations a waiver covers (not in ``violations``)
        self.world_size = 1
        if self.waivers is not None:
            self.waivers.matched = {}
        self.records: list[dict[str, Any]] = []  # the first ones, for the summary's triage
        self.acted_on: set[str] = set()
        self.coverage: Any = None  # a Coverage, once closed
        self.errors = 0
        self.broken = False
        self.closed = False
        self._lock = threading.RLock()  # feeding and closing
        self._report_lock = threading.RLock()  # violations, from the feeding or the reader thread

    # ----------------------------------------------------------------- RecordSink

    def consume(self, records: list[dict]) -> None:
        with self._lock:
            if self.broken or self.closed or not records:
                return
            if self.header is None:
                try:
                    self._start(records[0])
                except Exception as exc:
                    self._error("checker", exc)
                    return
            if self.process is not None:
                try:
                    self.process.send(records)
                    self.fed += len(records)
                except OSError as exc:
                    self._checker_process_failed(f"cannot feed the checker process ({exc})")
            if self._rank_unsettled:
                self._settle_rank(records)
            self._feed_here(records)

    def _feed_here(self, records: list[dict]) -> None:
        """Feed the in-process checker (every invariant, or the cross-rank ones only)."""
        checker = self.checker
        if checker is None:
            return
        counts = self.process is None
        for record in records:
            if self.broken:
                return
            try:
                checker.feed(record)
                if counts:
                    self.fed += 1
            except Exception as exc:
                self._error("checker", exc)

    def close(self) -> None:
        """Finish the checker on what it got, close the log, print the summary line."""
        with self._lock:
            if self.closed:
                return
            self.closed = True
            if self.header is None:  # nothing was recorded in this process
                if self.process is not None:
                    self.process.close(1.0)
                return
            if self.process is not None and not self.process.close(CLOSE_TIMEOUT_S) and not self.broken:
                self._error("checker", RuntimeError(
                    f"the checker process did not finish within {CLOSE_TIMEOUT_S:g} s; its last checks are missing"))
            if self.checker is not None and not self.broken:
                try:
                    self.checker.finish()
                except Exception as exc:
                    self._error("checker", exc)
            self._log_coverage()
            self._log_waivers()
            if self.log is not None:
                try:
                    self.log.close()
                except Exception as exc:
                    self._error("violation-log", exc)
            say(self.summary())
            debug(f"check mode: {self.fed} records checked")

    def _log_coverage(self) -> None:
        """Gather what every checker judged and left uncovered; write the stats record when
        some examples were outside the references' domain."""
        from traincheck_agent.inference.coverage import Coverage

        coverage = Coverage()
        try:
            if self.process is not None:
                coverage.merge(self.process.coverage)
            if self.checker is not None:
                coverage.merge(self.checker.coverage.to_json())
            self.coverage = coverage
            if (coverage.totals()[1] or coverage.judged.broken) and self.log is not None:
                from traincheck_agent.report.violations import coverage_record

                self.log.stats(coverage_record(coverage.to_json(), coverage.summary(self.by_id), rank=self.rank,
                                               run_id=self.run_id, host=self.host))
        except Exception as exc:
            self._error("violation-log", exc)

    def _log_waivers(self) -> None:
        """Write what each waiver matched (the ``waivers`` stats record) and say which matched
        nothing. With several ranks, a waiver may match on another rank only: rank 0 says how
        many matched nothing here, and ``traincheck report`` adds up the ranks."""
        waivers = self.waivers
        if waivers is None or not waivers.entries:
            return
        try:
            if self.log is not None:
                from traincheck_agent.report.violations import waivers_record

                self.log.stats(waivers_record(waivers.tally(), rank=self.rank, run_id=self.run_id, host=self.host))
            stale = waivers.stale()
            if not stale:
                return
            if self.world_size > 1:
                if self.rank == 0:
                    say(f"{len(stale)} of {len(waivers.entries)} waivers of {waivers.path} matched nothing on "
                        f"rank 0; `traincheck report {self.out_dir}` tells which matched on no rank")
                return
            for waiver in stale[:STALE_LINES]:
                say(stale_line(waiver, waivers.path))
            if len(stale) > STALE_LINES:
                say(f"{len(stale) - STALE_LINES} more waivers of {waivers.path} matched nothing in this run")
        except Exception as exc:
            self._error("violation-log", exc)

    def after_fork(self) -> None:
        """A forked child checks its own records from its own header on, in its own thread."""
        if self.process is not None:
            self.process.forget_after_fork()
        self.checker_kind = "thread"
        self._reset()

    # ----------------------------------------------------------------- internals

    def _start(self, header: dict) -> None:
        from traincheck_agent.check.online import OnlineChecker
        from traincheck_agent.report.violations import ViolationLog

        if header.get("kind") != "header":
            raise ValueError(f"the first record is a {header.get('kind')!r} record, not the header")
        rank = header.get("rank")
        self.rank = rank if isinstance(rank, int) else 0
        world = header.get("world_size")
        self.world_size = world if isinstance(world, int) and world > 0 else 1
        self.log = ViolationLog(self.out_dir, self.rank)
        # A header written before the process group came up may not know this process's rank.
        self._rank_unsettled = not (isinstance(header.get("world_size"), int) and header["world_size"] > 1)
        self.header = header
        if self.checker_kind == "process" and self.process is None:
            self.start_process()
        here = self.invariants
        if self.process is not None:
            here = [i for i in self.invariants if relations.compares_ranks(i.relation)]
        self.checker = OnlineChecker(here, self._on_violation) if here else None

    def _settle_rank(self, records: list[dict]) -> None:
        """Take the rank from the process record written when the process group came up (ranks
        that a script starts itself), so that each rank logs to its own file."""
        for record in records:
            if record.get("kind") == "process" and isinstance(record.get("world_size"), int) \
                    and record["world_size"] > 1 and isinstance(record.get("rank"), int):
                self._rank_unsettled = False
                self.world_size = record["world_size"]
                if record["rank"] != self.rank and not self.log.counts and not self.log.waived:
                    from traincheck_agent.report.violations import ViolationLog

                    self.rank = record["rank"]
                    self.log = ViolationLog(self.out_dir, self.rank)
                return
        # Ranks a script starts itself set up their process group before they train: once
        # training is under way, a single process stays one and its batches are not scanned.
        last = records[-1].get("step") if records else None
        if isinstance(last, int) and last >= 1:
            self._rank_unsettled = False

    def start_process(self) -> None:
        """Start the checker process now. Bootstrap calls this before torch is imported, so
        that the child's own start-up runs beside that import; otherwise the first batch does."""
        if self.checker_kind != "process" or self.process is not None:
            return
        self.checker_kind = "thread"  # one try: a failure (or a later loss) is not retried
        local = [i for i in self.invariants if not relations.compares_ranks(i.relation)]
        process = CheckerProcess(local, self._on_violation, self._on_process_error, self._on_process_lost)
        try:
            process.start()
        except OSError as exc:
            warn(f"cannot start the checker process ({exc}); checking in the training process")
            return
        self.process = process
        debug(f"check mode: checking in a child process (pid {process.proc.pid if process.proc else '?'})")

    def _on_process_error(self, message: str) -> None:
        with self._report_lock:
            self._error("checker", RuntimeError(message))

    def _on_process_lost(self, message: str) -> None:
        if not self.closed:  # close() holds the lock while it waits for the reader
            with self._lock:
                if not self.closed:
                    self._checker_process_failed(message)
                    return
        self._on_process_error(message)

    def _checker_process_failed(self, reason: str) -> None:
        """Carry on in this process from the next record: the invariants the child judged get a
        fresh checker here (examples it held half-built are lost), and the user is told."""
        process, self.process = self.process, None
        if process is None:
            return
        process.close(0.0)
        warn(f"{reason}; checking continues in the training process")
        if self.header is None:
            return  # not started yet: the header starts a checker of every invariant here
        from traincheck_agent.check.online import OnlineChecker

        self.checker = OnlineChecker(self.invariants, self._on_violation)
        self.checker.feed(self.header)

    def _on_violation(self, violation: dict[str, Any]) -> None:
        """Called by a checker (the in-process one, or the reader of the checker process) for
        each violation it finds."""
        with self._report_lock:
            self._report(violation)

    def _report(self, violation: dict[str, Any]) -> None:
        invariant_id = str(violation.get("invariant") or "")
        try:
            waiver = self.waivers.match(violation) if self.waivers is not None else None
        except Exception as exc:
            waiver = None
            self._error("violation-log", exc)
        if waiver is not None and self.waivers is not None:
            self._report_waived(violation, waived_mark(waiver, self.waivers.path))
            return
        try:
            from traincheck_agent.report.violations import violation_record

            self.violations += 1
            # A record without an invariant (a rank missing from the cross-rank exchange) is
            # counted under its relation, and never stops the training.
            label = invariant_id or str(violation.get("relation", "?"))
            self.violated[label] = self.violated.get(label, 0) + 1
            record = violation_record(violation, self.by_id.get(invariant_id), rank=self.rank,
                                      run_id=self.run_id, host=self.host)
            if faults.armed:
                faults.fire("violation-log")
            self.log.report(record)
            if len(self.records) < TRIAGE_RECORDS:
                self.records.append(record)
        except Exception as exc:
            self._error("violation-log", exc)
        if self.action != "log" and invariant_id and invariant_id not in self.acted_on \
                and self.request_action is not None:
            self.acted_on.add(invariant_id)  # each invariant stops the training once
            self.request_action(self._action_for(dict(violation)))

    def _report_waived(self, violation: dict[str, Any], mark: dict[str, Any]) -> None:
        """A violation a waiver covers: counted and logged as waived; no stderr line, no action."""
        try:
            from traincheck_agent.report.violations import violation_record

            self.waived += 1
            record = violation_record(violation, self.by_id.get(str(violation.get("invariant") or "")),
                                      rank=self.rank, run_id=self.run_id, host=self.host, waived=mark)
            self.log.report(record)
        except Exception as exc:
            self._error("violation-log", exc)

    def _action_for(self, violation: dict[str, Any]) -> Action:
        if self.action == "raise":
            return lambda: TrainCheckViolation(violation)

        def abort() -> None:
            try:
                say(f"aborting the training (TRAINCHECK_ACTION=abort), exit status {ABORT_EXIT_STATUS}: "
                    f"{describe_violation(violation)}")
                if self.writer is not None:
                    self.writer.close()  # the rest is checked, the log closed, the summary said
                else:
                    self.close()
                for stream in (sys.stdout, sys.stderr):
                    if stream is not None:
                        stream.flush()
            finally:
                os._exit(ABORT_EXIT_STATUS)

        return abort

    def _error(self, stage: str, exc: BaseException) -> None:
        self.errors += 1
        if self.on_error is not None:
            with contextlib.suppress(Exception):
                self.on_error(stage, exc)
        if self.errors > SINK_ERROR_BUDGET and not self.broken:
            self.broken = True
            warn(f"the online checker failed {self.errors} times; checking stopped in this process")

    def summary(self) -> str:
        """The end-of-run line (without the ``[traincheck]`` prefix): how many violations of how
        many invariants, and where; how many examples were outside the references' domain."""
        from traincheck_agent.report.sentences import plural

        checked = f"{plural(len(self.invariants), 'invariant')} checked"
        if self.broken:
            return (f"check summary (rank {self.rank}): checking stopped after {self.errors} checker errors; "
                    f"{self.violations} violations found before")
        covered = self.coverage.summary(self.by_id) if self.coverage is not None else ""
        covered = f"; {covered}" if covered else ""
        for note in (self._single_process_note(), self._boundary_note(), self._waived_note()):
            if note:
                covered += f"; {note}"
        if not self.violations:
            return f"check summary (rank {self.rank}): no violations ({checked}, {self.fed} records){covered}"
        worst = sorted(self.violated.items(), key=lambda kv: (-kv[1], kv[0]))[:3]
        top = ", ".join(f"{inv} x{n}" for inv, n in worst) + (", ..." if len(self.violated) > 3 else "")
        where = getattr(self.log, "path", None)
        return (f"check summary (rank {self.rank}): {plural(self.violations, 'violation')} of "
                f"{plural(len(self.violated), 'invariant')} ({top}); {checked}{covered}"
                + (f"; details in {where}" if where else "") + self._likely_cause())

    def _waived_note(self) -> str:
        if self.waivers is None:
            return ""
        stale = len(self.waivers.stale()) if self.waivers.entries else 0
        note = f"{self.waived} violations waived ({self.waivers.path})"
        return note + (f", {stale} waivers matched nothing" if stale else "")

    @staticmethod
    def _boundary_note() -> str:
        try:
            return runtime_boundary_note()
        except Exception:  # the summary is said whatever the clock says
            return ""

    def _single_process_note(self) -> str:
        """Cross-rank invariants that were never checked because no process group with other
        ranks came up, in words; "" when there were none."""
        skipped = set(getattr(self.checker, "skipped_relations", None) or ())
        count = sum(inv.relation in skipped for inv in self.invariants)
        return f"{count} cross-rank invariants not checked (this process was the only rank)" if count else ""

    def _likely_cause(self) -> str:
        """The top-ranked group of the first violations, as ``traincheck report`` would rank it:
        its sentence and, where the usual cause is known, the hint."""
        from traincheck_agent.report.sentences import plural
        from traincheck_agent.report.triage import causes, judged_counts, triage

        coverage = [{"rank": self.rank, "coverage": self.coverage.to_json()}] if self.coverage is not None else []
        groups = triage(self.records, self.by_id, judged_counts(coverage))
        if not groups:
            return ""
        top = groups[0]
        hint = f" (hint: {top.hint})" if top.hint else ""
        return f"; likely cause first ({plural(len(causes(groups)), 'group')}): {top.sentence}{hint}"

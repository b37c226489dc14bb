"""TraceWriter: buffering, background and exit-time flushing, fork safety, failure containment.

Process-level behaviour (signals, exit paths, fork) is tested on real subprocesses that import the
writer from this checkout and write real files.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from traincheck_agent.agent.record.trace_writer import STEP_BATCH_MIN, TraceWriter
from traincheck_agent.trace.reader import EmptyTraceError, TraceFile, find_trace_files

REPO = Path(__file__).resolve().parents[1]


def _header(rank: int = 0) -> dict:
    return {"run_id": "run1", "rank": rank, "world_size": 1}


def _records(out_dir: Path) -> list[dict]:
    return [r for path in find_trace_files([out_dir]) for r in TraceFile(path).records()]


def _wait_for_records(out_dir: Path, count: int, timeout_s: float = 10.0) -> list[dict]:
    """Poll until ``count`` records are on disk; the file may exist, still empty, for a moment."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            got = _records(out_dir)
        except EmptyTraceError:
            got = []
        if len(got) >= count or time.monotonic() > deadline:
            return got
        time.sleep(0.01)


def _script(body: str, prelude: bool = True) -> str:
    """A child program with a writer ``w`` on ``sys.argv[1]``, flushed only at exit or on demand."""
    head = textwrap.dedent(
        """
        import os, signal, sys, time
        from pathlib import Path
        from traincheck_agent.agent.record.trace_writer import TraceWriter, install_flush_on_exit
        out = Path(sys.argv[1])
        def rec(i, **kw):
            return {"kind": "call", "api": "torch.add", "id": i, "step": i, "phase": "train", **kw}
        """
    )
    if prelude:
        head += textwrap.dedent(
            """
            w = TraceWriter(out, lambda: {"run_id": "sub", "rank": 0},
                            flush_interval_s=60, flush_max_records=10**6)
            install_flush_on_exit(w)
            """
        )
    return head + textwrap.dedent(body)


def _default_sigint() -> None:
    """A job a shell starts in the background (``cmd &``) ignores SIGINT, and its children
    inherit that, Python included: give the child the SIGINT an interactive run has."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _popen(body: str, out_dir: Path, prelude: bool = True) -> subprocess.Popen:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TRAINCHECK_")}
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), env.get("PYTHONPATH", "")])
    return subprocess.Popen(
        [sys.executable, "-c", _script(body, prelude), str(out_dir)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=_default_sigint,
    )


def _run(body: str, out_dir: Path, prelude: bool = True) -> subprocess.CompletedProcess:
    proc = _popen(body, out_dir, prelude)
    stdout, stderr = proc.communicate(timeout=60)
    return subprocess.CompletedProcess(proc.args, proc.returncode, stdout, stderr)


def _wait_for_line(proc: subprocess.Popen, expected: str) -> None:
    line = proc.stdout.readline()
    assert line.strip() == expected, (line, proc.stderr.read() if proc.poll() is not None else "")


# ----------------------------------------------------------------------------- in process


def test_many_records_round_trip(tmp_path: Path) -> None:
    w = TraceWriter(tmp_path, lambda: _header(), flush_interval_s=0.01, flush_max_records=500)
    sent = [
        {"kind": "call", "api": f"torch.op{i % 7}", "id": i, "args": {"x": {"shape": [i, 2]}}}
        for i in range(20_000)
    ]
    for r in sent:
        w.emit(r)
    w.close()
    trace = TraceFile(w.path)
    assert trace.header["kind"] == "header"
    assert trace.header["run_id"] == "run1"
    assert trace.header["pid"] == os.getpid()
    assert w.path.name == f"trace_run1_rank0_pid{os.getpid()}.jsonl"
    assert list(trace.records()) == sent


def test_concurrent_emitters_and_flushes_lose_and_duplicate_nothing(tmp_path: Path) -> None:
    w = TraceWriter(tmp_path, lambda: _header(), flush_interval_s=0.001, flush_max_records=7)

    def produce(thread_no: int) -> None:
        for i in range(5000):
            w.emit({"kind": "call", "thread": thread_no, "id": i})
            if i % 997 == 0:
                w.flush()

    threads = [threading.Thread(target=produce, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    w.close()
    got = _records(tmp_path)
    assert len(got) == 4 * 5000
    for n in range(4):
        assert [r["id"] for r in got if r["thread"] == n] == list(range(5000))


def test_non_dict_records_are_dropped_not_written(tmp_path: Path, capsys) -> None:
    w = TraceWriter(tmp_path, lambda: _header(), flush_interval_s=60)
    w.emit({"kind": "call", "id": 0})
    w.emit(None)  # type: ignore[arg-type]
    w.emit([1, 2])  # type: ignore[arg-type]
    w.close()
    got = _records(tmp_path)
    assert got[0] == {"kind": "call", "id": 0}
    assert got[1]["what"] == "dropped_records" and got[1]["count"] == 2
    assert capsys.readouterr().err.count("not a dict") == 1


def test_emit_does_not_touch_the_file_until_flush(tmp_path: Path) -> None:
    out = tmp_path / "out"
    w = TraceWriter(out, lambda: _header(), flush_interval_s=60, flush_max_records=10**6)
    for i in range(100):
        w.emit({"kind": "call", "id": i})
    time.sleep(0.2)
    assert w.path is None
    assert not out.exists()
    w.flush()
    assert w.path is not None and w.path.exists()
    assert [r["id"] for r in TraceFile(w.path).records()] == list(range(100))
    w.close()


def test_full_buffer_wakes_the_background_thread(tmp_path: Path) -> None:
    w = TraceWriter(tmp_path, lambda: _header(), flush_interval_s=60, flush_max_records=10)
    for i in range(25):
        w.emit({"kind": "call", "id": i})
    assert len(_wait_for_records(tmp_path, 10)) >= 10
    w.close()
    assert [r["id"] for r in _records(tmp_path)] == list(range(25))


def test_step_end_wakes_the_background_thread_once_enough_records_wait(tmp_path: Path) -> None:
    w = TraceWriter(tmp_path, lambda: _header(), flush_interval_s=60, flush_max_records=100_000)
    w.emit({"kind": "call", "id": 0})
    w.step_ended()  # one record waits: not worth a wake-up
    time.sleep(0.3)
    assert not list(tmp_path.glob("trace_*.jsonl"))
    for i in range(1, STEP_BATCH_MIN):
        w.emit({"kind": "call", "id": i})
    w.step_ended()
    assert [r["id"] for r in _wait_for_records(tmp_path, STEP_BATCH_MIN)] == list(range(STEP_BATCH_MIN))
    w.close()


def test_interval_flush_without_explicit_flush(tmp_path: Path) -> None:
    w = TraceWriter(tmp_path, lambda: _header(), flush_interval_s=0.02)
    w.emit({"kind": "call", "id": 1})
    assert _wait_for_records(tmp_path, 1) == [{"kind": "call", "id": 1}]
    w.close()


def test_header_is_taken_at_first_flush_so_a_late_rank_is_used(tmp_path: Path) -> None:
    facts = {"run_id": "late", "rank": None}
    w = TraceWriter(tmp_path, lambda: dict(facts), flush_interval_s=60)
    w.emit({"kind": "call", "id": 0})
    facts["rank"] = 3  # e.g. torch.distributed initialised after the first records
    w.close()
    assert w.path.name == f"trace_late_rank3_pid{os.getpid()}.jsonl"
    assert TraceFile(w.path).header["rank"] == 3


def test_unserialisable_values_never_stop_the_writer(tmp_path: Path, capsys) -> None:
    class Odd:
        def __str__(self) -> str:
            return "odd!"

    w = TraceWriter(tmp_path, lambda: _header(), flush_interval_s=60)
    w.emit({"kind": "call", "id": 0, "v": Odd(), "keys": {1: "one"}})
    w.emit({"kind": "call", "id": 1, "v": 2**80})  # beyond orjson's integers: dropped
    w.emit({"kind": "call", "id": 2})
    w.close()
    got = _records(tmp_path)
    assert got[0] == {"kind": "call", "id": 0, "v": "odd!", "keys": {"1": "one"}}
    assert got[1] == {"kind": "call", "id": 2}
    note = got[2]
    assert (note["kind"], note["what"], note["reason"], note["count"]) == (
        "note",
        "dropped_records",
        "unserialisable",
        1,
    )
    assert capsys.readouterr().err.count("could not be serialised") == 1


def test_emit_after_close_is_ignored_and_close_is_idempotent(tmp_path: Path) -> None:
    w = TraceWriter(tmp_path, lambda: _header())
    w.emit({"kind": "call", "id": 0})
    w.close()
    w.emit({"kind": "call", "id": 1})
    w.flush()
    w.close()
    assert [r["id"] for r in _records(tmp_path)] == [0]


def test_unwritable_directory_warns_once_and_training_continues(tmp_path: Path, capsys) -> None:
    blocker = tmp_path / "a_file"
    blocker.write_text("not a directory")
    out = blocker / "sub"  # tests run as root, so permissions alone would not block writing
    w = TraceWriter(out, lambda: _header(), flush_interval_s=0.01, flush_max_records=5)
    for i in range(1000):
        w.emit({"kind": "call", "id": i})
        if i % 100 == 0:
            w.flush()
    w.close()
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.startswith("[traincheck]")]
    assert len(lines) == 1, err
    assert str(out) in lines[0]
    assert w.path is None
    assert not w._buffer  # records are discarded, not kept in memory


def test_failing_header_provider_is_contained(tmp_path: Path, capsys) -> None:
    def broken() -> dict:
        raise RuntimeError("no facts")

    w = TraceWriter(tmp_path, broken, flush_interval_s=60)
    w.emit({"kind": "call", "id": 0})
    w.close()
    assert "no facts" in capsys.readouterr().err
    assert find_trace_files([tmp_path]) == []


# ----------------------------------------------------------------------------- subprocesses


@pytest.mark.slow
def test_sigterm_flushes_and_keeps_the_exit_status(tmp_path: Path) -> None:
    proc = _popen(
        """
        for i in range(500):
            w.emit(rec(i))
        print("ready", flush=True)
        while True:
            time.sleep(0.01)
        """,
        tmp_path,
    )
    _wait_for_line(proc, "ready")
    assert not find_trace_files([tmp_path])  # nothing flushed yet: interval is 60 s
    proc.send_signal(signal.SIGTERM)
    proc.communicate(timeout=30)
    assert proc.returncode == -signal.SIGTERM
    assert [r["id"] for r in _records(tmp_path)] == list(range(500))


@pytest.mark.slow
def test_sigterm_while_emitting_in_a_loop(tmp_path: Path) -> None:
    proc = _popen(
        """
        w = TraceWriter(out, lambda: {"run_id": "sub", "rank": 0},
                        flush_interval_s=0.02, flush_max_records=100)
        install_flush_on_exit(w)
        i = 0
        while True:
            w.emit(rec(i))
            sum(range(20))  # a little work per record, as a traced API call would do
            if i == 5000:
                w.flush()
                print("ready", flush=True)
            i += 1
        """,
        tmp_path,
        prelude=False,
    )
    _wait_for_line(proc, "ready")
    time.sleep(0.2)
    proc.send_signal(signal.SIGTERM)
    proc.communicate(timeout=30)
    assert proc.returncode == -signal.SIGTERM
    records = _records(tmp_path)
    ids = [r["id"] for r in records if r["kind"] == "call"]
    dropped = sum(r["count"] for r in records if r["kind"] == "note")
    assert ids[:5001] == list(range(5001))
    assert ids == sorted(set(ids))  # in order, no duplicates
    assert ids[-1] + 1 == len(ids) + dropped  # any gap is accounted for by a drop note


@pytest.mark.slow
def test_sigterm_while_the_main_thread_is_stuck_in_c_code(tmp_path: Path) -> None:
    # A Python-level handler cannot run until the C call returns (a rank stuck in a collective);
    # without the agent SIGTERM would kill at once, so the watcher thread must do it.
    proc = _popen(
        """
        import ctypes
        for i in range(200):
            w.emit(rec(i))
        print("ready", flush=True)
        ctypes.CDLL(None).system(b"exec sleep 15 </dev/null >/dev/null 2>&1")  # EINTR-proof wait
        print("returned", flush=True)
        """,
        tmp_path,
    )
    _wait_for_line(proc, "ready")
    time.sleep(0.3)
    started = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    stdout, _ = proc.communicate(timeout=30)
    assert time.monotonic() - started < 10
    assert proc.returncode == -signal.SIGTERM
    assert "returned" not in stdout
    assert [r["id"] for r in _records(tmp_path)] == list(range(200))


@pytest.mark.slow
def test_sigterm_to_a_forked_child_leaves_the_parent_alone(tmp_path: Path) -> None:
    result = _run(
        """
        w.emit(rec(0))
        pid = os.fork()
        if pid == 0:
            w.emit(rec(1))
            time.sleep(30)
            os._exit(0)
        time.sleep(0.3)
        os.kill(pid, signal.SIGTERM)
        _, status = os.waitpid(pid, 0)
        time.sleep(1.0)  # the parent's watcher would act within its grace
        w.emit(rec(2))
        print(pid, os.waitstatus_to_exitcode(status), flush=True)
        """,
        tmp_path,
    )
    assert result.returncode == 0, result.stderr
    child_pid, child_status = map(int, result.stdout.split())
    assert child_status == -signal.SIGTERM
    by_pid = {TraceFile(p).header["pid"]: p for p in find_trace_files([tmp_path])}
    assert [r["id"] for r in TraceFile(by_pid.pop(child_pid)).records()] == [1]
    (parent,) = by_pid.values()
    assert [r["id"] for r in TraceFile(parent).records()] == [0, 2]


@pytest.mark.slow
def test_sigterm_handler_installed_with_the_first_record_only(tmp_path: Path) -> None:
    result = _run(
        """
        def fd_now():
            fd = signal.set_wakeup_fd(-1)
            signal.set_wakeup_fd(fd)
            return fd
        import threading
        print(signal.getsignal(signal.SIGTERM) is signal.SIG_DFL, fd_now(), threading.active_count())
        w.emit(rec(0))
        print(signal.getsignal(signal.SIGTERM) is signal.SIG_DFL, fd_now(), threading.active_count())
        """,
        tmp_path,
    )
    before, after = result.stdout.splitlines()
    assert before == "True -1 1", result.stderr  # nothing recorded: nothing to see
    assert after == "False -1 3", result.stderr  # ours, the writer and the watcher; the fd hidden


@pytest.mark.slow
def test_sigterm_handler_not_installed_over_a_user_handler(tmp_path: Path) -> None:
    result = _run(
        """
        def mine(signum, frame):
            print("user handler", flush=True)
            sys.exit(5)
        signal.signal(signal.SIGTERM, mine)
        w = TraceWriter(out, lambda: {"run_id": "sub", "rank": 0}, flush_interval_s=60)
        install_flush_on_exit(w)
        assert signal.getsignal(signal.SIGTERM) is mine
        w.emit(rec(0))
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(10)
        """,
        tmp_path,
        prelude=False,
    )
    assert result.returncode == 5, result.stderr
    assert result.stdout.strip() == "user handler"
    assert [r["id"] for r in _records(tmp_path)] == [0]  # the user's sys.exit reaches atexit


@pytest.mark.slow
def test_a_later_handler_that_chains_to_ours_decides(tmp_path: Path) -> None:
    result = _run(
        """
        w.emit(rec(0))  # the model is built: the handler is ours from here on
        previous = signal.getsignal(signal.SIGTERM)
        def graceful(signum, frame):
            previous(signum, frame)  # chains, as Lightning does
            print("checkpoint saved", flush=True)
            sys.exit(7)
        signal.signal(signal.SIGTERM, graceful)
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(10)
        """,
        tmp_path,
    )
    assert result.returncode == 7, result.stderr
    assert result.stdout.strip() == "checkpoint saved"
    assert [r["id"] for r in _records(tmp_path)] == [0]


@pytest.mark.slow
def test_the_programs_wakeup_fd_is_its_own_and_the_watcher_comes_back(tmp_path: Path) -> None:
    # The program sees the wakeup fd it would see without the agent; while its own fd is set,
    # signals reach it; once it lets go, a rank stuck in C code still dies of SIGTERM at once.
    proc = _popen(
        """
        import asyncio, ctypes, socket
        w.emit(rec(0))
        a, b = socket.socketpair()
        a.setblocking(False)
        print(signal.set_wakeup_fd(a.fileno()), signal.set_wakeup_fd(-1) == a.fileno(), flush=True)
        loop = asyncio.new_event_loop()
        fired = []
        loop.add_signal_handler(signal.SIGUSR1, lambda: (fired.append(1), loop.stop()))
        loop.call_soon(os.kill, os.getpid(), signal.SIGUSR1)
        loop.run_forever()
        loop.remove_signal_handler(signal.SIGUSR1)
        loop.close()
        print("asyncio", fired, signal.set_wakeup_fd(-1), flush=True)
        signal.set_wakeup_fd(-1)
        w.emit(rec(1))
        print("ready", flush=True)
        ctypes.CDLL(None).system(b"exec sleep 15 </dev/null >/dev/null 2>&1")
        print("returned", flush=True)
        """,
        tmp_path,
    )
    assert proc.stdout.readline().strip() == "-1 True"
    assert proc.stdout.readline().strip() == "asyncio [1] -1"
    _wait_for_line(proc, "ready")
    time.sleep(0.3)
    started = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    stdout, stderr = proc.communicate(timeout=30)
    assert time.monotonic() - started < 10, stderr
    assert proc.returncode == -signal.SIGTERM, stderr
    assert "returned" not in stdout
    assert [r["id"] for r in _records(tmp_path)] == [0, 1]


@pytest.mark.slow
def test_sigterm_flushes_while_the_program_holds_the_wakeup_fd(tmp_path: Path) -> None:
    proc = _popen(
        """
        import socket
        w.emit(rec(0))
        a, b = socket.socketpair()
        a.setblocking(False)
        signal.set_wakeup_fd(a.fileno())
        print("ready", flush=True)
        while True:
            time.sleep(0.01)
        """,
        tmp_path,
    )
    _wait_for_line(proc, "ready")
    proc.send_signal(signal.SIGTERM)
    proc.communicate(timeout=30)
    assert proc.returncode == -signal.SIGTERM
    assert [r["id"] for r in _records(tmp_path)] == [0]


@pytest.mark.slow
@pytest.mark.parametrize(
    ("ending", "status"),
    [
        ("raise RuntimeError('boom')", 1),
        ("sys.exit(3)", 3),
        ("pass", 0),
    ],
)
def test_exit_paths_flush(tmp_path: Path, ending: str, status: int) -> None:
    result = _run(
        f"""
        for i in range(300):
            w.emit(rec(i))
        {ending}
        """,
        tmp_path,
    )
    assert result.returncode == status, result.stderr
    assert [r["id"] for r in _records(tmp_path)] == list(range(300))


@pytest.mark.slow
def test_keyboard_interrupt_flushes(tmp_path: Path) -> None:
    proc = _popen(
        """
        for i in range(300):
            w.emit(rec(i))
        print("ready", flush=True)
        while True:
            time.sleep(0.01)
        """,
        tmp_path,
    )
    _wait_for_line(proc, "ready")
    proc.send_signal(signal.SIGINT)
    _, stderr = proc.communicate(timeout=30)
    assert "KeyboardInterrupt" in stderr
    assert proc.returncode == -signal.SIGINT
    assert [r["id"] for r in _records(tmp_path)] == list(range(300))


@pytest.mark.slow
def test_sigkill_mid_stream_leaves_a_readable_file(tmp_path: Path, capsys) -> None:
    proc = _popen(
        """
        w = TraceWriter(out, lambda: {"run_id": "sub", "rank": 0},
                        flush_interval_s=0.005, flush_max_records=50)
        i = 0
        ready = False
        while True:
            w.emit(rec(i, pad="x" * 200))
            if not ready and i % 1000 == 0 and w.path and w.path.stat().st_size > 0:
                print("ready", flush=True)  # the background thread has written something
                ready = True
            i += 1
        """,
        tmp_path,
        prelude=False,
    )
    _wait_for_line(proc, "ready")
    time.sleep(0.1)
    proc.kill()
    proc.communicate(timeout=30)
    assert proc.returncode == -signal.SIGKILL
    (path,) = find_trace_files([tmp_path])
    whole = [r["id"] for r in TraceFile(path).records()]
    assert whole == list(range(len(whole))) and len(whole) >= 1
    with path.open("ab") as handle:  # what a kill in the middle of os.write leaves behind
        handle.write(b'{"kind": "call", "api": "torch.ad')
    capsys.readouterr()
    assert [r["id"] for r in TraceFile(path).records()] == whole
    err = capsys.readouterr().err
    assert err.count("torn last line") == 1 and str(path) in err


@pytest.mark.slow
def test_forked_child_writes_its_own_file_without_the_parents_records(tmp_path: Path) -> None:
    result = _run(
        """
        for i in range(50):
            w.emit(rec(i))  # buffered in the parent when it forks
        pid = os.fork()
        if pid == 0:
            w.emit(rec(1000))
            sys.exit(0)  # atexit flushes the child's writer
        _, status = os.waitpid(pid, 0)
        w.emit(rec(51))
        print(pid, os.waitstatus_to_exitcode(status))
        """,
        tmp_path,
    )
    assert result.returncode == 0, result.stderr
    child_pid, child_status = map(int, result.stdout.split())
    assert child_status == 0
    files = {TraceFile(p).header["pid"]: p for p in find_trace_files([tmp_path])}
    assert len(files) == 2
    child_file = files.pop(child_pid)
    (parent_file,) = files.values()
    assert child_file.name == f"trace_sub_rank0_pid{child_pid}.jsonl"
    assert [r["id"] for r in TraceFile(child_file).records()] == [1000]
    assert [r["id"] for r in TraceFile(parent_file).records()] == [*range(50), 51]


@pytest.mark.slow
def test_forked_child_that_never_emits_writes_nothing(tmp_path: Path) -> None:
    result = _run(
        """
        w.emit(rec(0))
        pid = os.fork()
        if pid == 0:
            os._exit(0)
        os.waitpid(pid, 0)
        """,
        tmp_path,
    )
    assert result.returncode == 0, result.stderr
    (only,) = find_trace_files([tmp_path])
    assert TraceFile(only).header["pid"] != 0
    assert [r["id"] for r in TraceFile(only).records()] == [0]


@pytest.mark.slow
def test_multiprocessing_fork_child_flushes_at_its_exit(tmp_path: Path) -> None:
    result = _run(
        """
        import multiprocessing as mp
        def work():
            w.emit(rec(7))  # the child leaves through os._exit: no atexit
        w.emit(rec(0))
        p = mp.get_context("fork").Process(target=work)
        p.start()
        p.join()
        print(p.pid)
        """,
        tmp_path,
    )
    assert result.returncode == 0, result.stderr
    child_pid = int(result.stdout.split()[0])
    by_pid = {TraceFile(p).header["pid"]: p for p in find_trace_files([tmp_path])}
    assert [r["id"] for r in TraceFile(by_pid[child_pid]).records()] == [7]

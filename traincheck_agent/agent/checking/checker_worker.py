"""The checker process of check mode: ``python -m traincheck_agent.agent.checking.checker_worker``.

Started by :class:`~traincheck_agent.agent.checking.checker_process.CheckerProcess` from the training
process, which stays the only one that logs, prints and acts; this process only judges. It runs
the same :class:`~traincheck_agent.check.online.OnlineChecker` as the in-process checker, on its
own interpreter lock, so checking never competes with the training thread for the parent's.
It never imports torch.

Protocol, one JSON document per line:

* stdin: first ``{"invariants": [...]}`` (``Invariant.to_json``), then one JSON array of records
  per batch, in the training process's order, header first. End of input ends the run.
* stdout: ``{"violation": {...}}`` per violation, ``{"error": "..."}`` per contained checker
  error, and last ``{"done": {"fed": <records checked>, "coverage": {...}}}`` (``Coverage.to_json``:
  examples judged and outside the references' domain, per invariant).

SIGINT and SIGTERM are ignored: a Ctrl-C or a launcher's SIGTERM reaches the whole process
group, and this process must still judge what the trainer flushes on its way out. It ends when
its input does, which also happens when the training process dies.
"""

from __future__ import annotations

import signal
import sys
from typing import IO, Any

import orjson

from traincheck_agent.check.online import OnlineChecker
from traincheck_agent.exception_text import exception_text
from traincheck_agent.inference.invariant import Invariant


def _line(message: dict[str, Any]) -> bytes:
    return orjson.dumps(message, default=str, option=orjson.OPT_NON_STR_KEYS) + b"\n"


def serve(source: IO[bytes], sink: IO[bytes]) -> int:
    """Judge the records read from ``source`` and report to ``sink``; the number of records fed."""
    first = orjson.loads(source.readline() or b"{}")
    invariants = [Invariant.from_json(raw) for raw in first.get("invariants", [])]
    pending: list[bytes] = []
    # Cross-rank relations stay in the training process (they exchange through its store).
    checker = OnlineChecker(invariants, lambda v: pending.append(_line({"violation": v})),
                            exchange=lambda run_id, restart: None)
    fed = 0

    def error(stage: str, exc: BaseException) -> None:
        pending.append(_line({"error": f"{stage}: {exception_text(exc)}"}))

    for line in source:
        try:
            batch = orjson.loads(line)
        except orjson.JSONDecodeError as exc:
            error("decode", exc)
            continue
        for record in batch if isinstance(batch, list) else ():
            try:
                checker.feed(record)
                fed += 1
            except Exception as exc:  # one bad record must not end the checking
                error("checker", exc)
        if pending:
            sink.write(b"".join(pending))
            sink.flush()
            pending.clear()
    try:
        checker.finish()
    except Exception as exc:
        error("checker", exc)
    pending.append(_line({"done": {"fed": fed, "coverage": checker.coverage.to_json()}}))
    sink.write(b"".join(pending))
    sink.flush()
    return fed


def main() -> int:
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, signal.SIG_IGN)
    try:
        serve(sys.stdin.buffer, sys.stdout.buffer)
    except BrokenPipeError:  # the training process is gone: nobody to report to
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

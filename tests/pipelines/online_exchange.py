"""Replays each rank's trace through an online checker on that rank, under torchrun with gloo,
so the cross-rank exchange runs through the real store. Rank 0 writes what it reported.

    torchrun --nproc_per_node=2 online_exchange.py TRACES INVARIANTS OUT [--stop-rank1-at STEP]
"""

import argparse
import json
import time

import torch.distributed as dist

from traincheck_agent.check.online import OnlineChecker
from traincheck_agent.check.rank_exchange import StoreExchange
from traincheck_agent.inference.invariant import read_invariants
from traincheck_agent.trace.reader import TraceFile, find_trace_files


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("traces")
    parser.add_argument("invariants")
    parser.add_argument("out")
    parser.add_argument("--stop-rank1-at", type=int, default=None)
    parser.add_argument("--timeout", type=float, default=20.0)
    args = parser.parse_args()
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    [path] = [p for p in find_trace_files([args.traces]) if f"_rank{rank}_" in p.name]
    trace = TraceFile(path)
    reported: list[dict] = []
    checker = OnlineChecker(read_invariants(args.invariants), reported.append,
                            exchange=lambda run, restart: StoreExchange.from_default_group(run, restart, args.timeout))
    checker.feed(trace.header)
    for record in trace.records():
        if rank == 1 and args.stop_rank1_at is not None and record.get("step", -1) >= args.stop_rank1_at:
            break  # this rank stops publishing: as if it hung or died
        checker.feed(record)
    started = time.monotonic()
    checker.finish()
    if rank == 0:
        with open(args.out, "w") as handle:
            json.dump({"violations": reported, "finish_seconds": time.monotonic() - started,
                       "relations": checker.relations}, handle)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()

"""Leave torch.distributed so that a rank's process exits cleanly once training is done.

torch's gloo backend runs collectives on worker threads of the process group. A collective
started during backward (DDP's and ZeRO's gradient reductions) keeps the Python context that
torch stashes for backward, and the worker thread that ran it may be the one that releases it
last, which takes the GIL. If the interpreter is already finalizing by then, the thread cannot
take it and the process aborts after training finished ("terminate called without an active
exception", SIGABRT). It is a race in torch, with or without the agent: on a loaded machine
about one 2-rank run in four lost it.

So a rank leaves with the interpreter whole: ranks meet at a barrier, the objects the caller
dropped (the DDP model, DeepSpeed's engine ...) are collected here, in the main thread, the
group is destroyed, and the GIL is given up for a moment so that worker threads still releasing
their last collectives can finish.
"""

import gc
import time

import torch.distributed as dist

GIL_HANDOFF_S = 0.05


def leave_process_group() -> None:
    dist.barrier()
    gc.collect()
    dist.destroy_process_group()
    time.sleep(GIL_HANDOFF_S)

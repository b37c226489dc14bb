"""Compiled regions: code that ``torch.compile`` traces or compiles is not recorded.

While dynamo traces a function it runs our wrappers symbolically: recording there (clocks,
thread-locals, building records, writing) would break the graph at every wrapped call and
record values of fake tensors. So every wrapper first asks ``in_compiled_region()`` and, when it
is true, only calls through. Dynamo folds that question to the constant True while tracing, so
the pass-through is inlined into the graph without a break and the compiled code holds no trace
of the agent. Run eagerly it costs two small function calls (about 50 ns); it is also true for the
whole compilation (AOTAutograd, inductor), whose framework calls are no training calls either.
The calls around the compiled model (optimizer step, backward, ``zero_grad``, the compiled
module's own call) run eagerly and are recorded as usual.

The user is told once per process, when dynamo first compiles something under an active agent.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from traincheck_agent.agent import runtime
from traincheck_agent.messages import warn_once

NOTICE_KEY = "torch-compile"
NOTICE = ("torch.compile: calls inside compiled regions are not recorded; the calls around them "
          "(the compiled module's call, backward, the optimizer step) and their state snapshots are")


def _resolve_is_compiling() -> Callable[[], bool]:
    """The flag function dynamo constant-folds, newest name first; the function object itself
    is returned (not a wrapper of ours) so dynamo recognises it and the eager call stays cheap."""
    compiler = getattr(torch, "compiler", None)
    found = getattr(compiler, "is_compiling", None)
    if callable(found):
        return found
    found = getattr(getattr(torch, "_utils", None), "is_compiling", None)  # torch < 2.3
    if callable(found):
        return found
    return lambda: False


in_compiled_region: Callable[[], bool] = _resolve_is_compiling()


def is_compiled_module(module: Any) -> bool:
    """The module ``torch.compile(model)`` returns (its calls run the compiled code)."""
    return type(module).__name__ == "OptimizedModule"


def _on_compile_start(*_args: Any) -> None:
    try:
        if runtime.current is not None:
            warn_once(NOTICE_KEY, NOTICE)
    except Exception:  # a notice must never fail a compilation
        pass


_watching = False  # dynamo's callback is registered once per process (it reads ``runtime.current``)


def watch_compilation(dynamo: Any) -> None:
    """Post-import hook of ``torch._dynamo``: say the notice when the first compilation starts
    (torch without compile callbacks: say it now, dynamo is imported to compile)."""
    global _watching
    if _watching:
        return
    _watching = True
    try:
        from torch._dynamo.callback import on_compile_start
    except Exception:
        _on_compile_start()
        return
    on_compile_start(_on_compile_start)

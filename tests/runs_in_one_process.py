"""Collect several runs of one pipeline script in a single child process: the agent is started
before each run and taken out after it (``traincheck_agent.agent.in_process``), so a heavy
framework (Lightning: seconds of imports) is imported once for all of them.

``python runs_in_one_process.py SCRIPT SPEC`` where the JSON file SPEC maps each run's output
folder to the script's arguments. Each run starts from the same random state."""

import json
import runpy
import sys

import torch

from traincheck_agent.agent.in_process import start_in_process, stop_in_process


def main() -> None:
    script, spec_path = sys.argv[1], sys.argv[2]
    with open(spec_path) as spec:
        runs = json.load(spec)
    for out, args in runs.items():
        sys.argv = [script, *args]
        with torch.random.fork_rng(devices=[]):
            start_in_process("collect", {"TRAINCHECK_MODE": "collect", "TRAINCHECK_OUT": out})
            try:
                runpy.run_path(script, run_name="__main__")
            finally:
                stop_in_process()


if __name__ == "__main__":
    main()

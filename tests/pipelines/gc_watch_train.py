"""The bundled CNN example, reporting how many full garbage collections ran while it trained.

Objects that outlive the young generations (records an agent holds on to for long, say) are
promoted, and enough promotions trigger a full collection, which scans every object of the
process, torch's included. Prints the example's result line, then its own."""

import gc
import json
import sys

from traincheck_agent.examples import cnn_train


def main() -> None:
    full = 0

    def count(phase: str, info: dict) -> None:
        nonlocal full
        if phase == "start" and info["generation"] == len(gc.get_count()) - 1:
            full += 1

    gc.callbacks.append(count)
    cnn_train.main(sys.argv[1:])
    gc.callbacks.remove(count)
    sys.stdout.write(json.dumps({"full_collections": full}) + "\n")


if __name__ == "__main__":
    main()

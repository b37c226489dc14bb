"""``python -m traincheck_agent``: the same as the ``traincheck`` command."""

from traincheck_agent.cli import main

raise SystemExit(main())

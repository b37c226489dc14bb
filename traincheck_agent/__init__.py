"""traincheck-agent: learn training invariants from clean runs, check them online.

Importing this package is cheap: nothing of torch is imported here.
"""

__version__ = "0.1.0"

"""The ``accelscope`` command: a thin typer shell over the typed API.

It parses flags, calls the API, prints, and maps errors to exit codes: an ``AccelscopeError``
is one line on stderr with its exit code (2 for bad input); ``--debug`` shows the traceback.

Each command is one module ``cli/_<command>.py``; importing it registers the command, and every
such module is imported here, so a new command needs no line in this file. A command module
imports its workflow and views inside the command, when it runs: ``import accelscope.cli`` (and
so ``accelscope --help``) imports no torch, numpy or llm package (tests/cli/test_cli_startup.py).
Its flags come from the groups of ``cli/_flag_groups.py``, each declared once.
"""

import importlib
import pkgutil

from accelscope.cli._app import app
from accelscope.cli._main import main

_SHARED = {"_app", "_main", "_types"}
for _module in sorted(m.name for m in pkgutil.iter_modules(__path__)):
    if _module.startswith("_") and not _module.startswith("__") and _module not in _SHARED:
        importlib.import_module(f"{__name__}.{_module}")

__all__ = ["app", "main"]

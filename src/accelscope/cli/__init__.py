"""The ``accelscope`` command: a thin typer shell over the typed API.

It parses flags, calls the API, prints, and maps errors to exit codes: an ``AccelscopeError``
is one line on stderr with its exit code (2 for bad input); ``--debug`` shows the traceback.
"""

# importing a module registers its commands
from accelscope.cli import _bench, _doctor, _env, _load, _measure, _plan, _roofline, _runs  # noqa: F401
from accelscope.cli._app import app
from accelscope.cli._main import main

__all__ = ["app", "main"]

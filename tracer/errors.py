"""The tracer's one error type: bad input or unreachable weights, shown as one line by the CLI."""

from __future__ import annotations

from ecosim.errors import EcoSimError, Interrupted  # noqa: F401  (Interrupted: re-exported for the recorder)


class TracerError(EcoSimError):
    """A problem the user can fix (a path, a value, missing weights); no traceback is shown."""


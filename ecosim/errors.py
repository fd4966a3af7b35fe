"""The one error type the CLI turns into a single line on stderr and exit status 2."""


class EcoSimError(Exception):
    """A problem with the user's input (a path, a value, a trace), reported without a traceback."""

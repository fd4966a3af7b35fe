"""The one error type the CLI turns into a single line on stderr and exit status 2."""


class EcoSimError(Exception):
    """A problem with the user's input (a path, a value, a trace), reported without a traceback."""


class Interrupted(KeyboardInterrupt):
    """Ctrl-C during long work; the message says what was kept and how to resume (exit status 130).

    A KeyboardInterrupt still, so code that cleans up on Ctrl-C sees it as one."""


class InternalError(Exception):
    """A figure the model must never produce (a non-finite or negative time): a bug, or an input the gate let
    through. Its message names the inputs that produced it; the CLI prints it in one line, exit status 70."""

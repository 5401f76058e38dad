"""User-facing errors: each carries one line that names the field, the value and what is allowed."""


class ServeSimError(Exception):
    """An error caused by the user's input. The CLI prints its message on one line and exits with 2."""


class ConfigError(ServeSimError):
    """A scenario, catalog entry or command-line value is invalid."""


class TraceError(ServeSimError):
    """A trace file is missing or malformed (the message names the file and line)."""


class DoesNotFitError(ServeSimError):
    """A model's weights (plus activations and reserve) do not fit on the GPU."""

"""User-facing errors: each carries one line that names the field, the value and what is allowed."""


def did_you_mean(*names: str) -> str:
    """The words an error line adds for what the user most likely meant: " (did you mean 'a' or 'b'?)", or '' for
    none. Each lookup decides which names are safe to offer; this is only how the line says it."""
    return f" (did you mean {' or '.join(map(repr, names))}?)" if names else ""


class ServeSimError(Exception):
    """An error caused by the user's input. The CLI prints its message on one line and exits with 2."""


class ConfigError(ServeSimError):
    """A scenario, catalog entry or command-line value is invalid."""


class TraceError(ServeSimError):
    """A trace file is missing or malformed (the message names the file and line)."""


class DoesNotFitError(ServeSimError):
    """A model's weights (plus activations and reserve) do not fit on the GPU."""

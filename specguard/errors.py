"""Errors a user can cause. The CLI turns each into one line and exit code 2; nothing else may escape."""


class UserError(Exception):
    """Bad input from the user: a missing path, a broken config or pack. The message is the whole report."""


class SourceError(Exception):
    """A file under analysis cannot be read or parsed; reported as an SG000 finding, not a crash."""

    def __init__(self, message: str, line: int = 1) -> None:
        super().__init__(message)
        self.line = line

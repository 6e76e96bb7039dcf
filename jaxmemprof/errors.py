"""Errors the user can fix: reported as one line naming the input, exit status 2."""


class InputError(Exception):
    """Bad input (a missing file, a corrupt profile, ...).

    ``source`` names the file (or other input) and ``problem`` says what is
    wrong with it; ``str()`` gives the one line shown to the user.
    """

    def __init__(self, source: str, problem: str):
        super().__init__(source, problem)
        self.source = str(source)
        self.problem = problem

    def __str__(self) -> str:
        return f"{self.source}: {self.problem}"


def check_not_empty(path) -> None:
    """An empty argument (often an unset shell variable) names no file; as
    a path it would silently mean the current directory."""
    if str(path) == "":
        raise InputError("''", "an empty path (an unset variable?)")

"""The exception types the app shows to its user as a message, not a traceback."""


class LabError(Exception):
    """A problem with the user's settings or environment, said in words they can act on."""


class FormulaError(LabError):
    """An exception raised by the code under test (a formula, or a user's reference), carried to the
    page as that code's own, never as a bug in Gradient Lab. ``error`` is the original exception."""

    def __init__(self, whose: str, error: BaseException) -> None:
        said = str(error)
        super().__init__(f"{whose} raised {type(error).__name__}: {said}{'' if said.endswith('.') else '.'}")
        self.whose, self.error = whose, error


def original(error: BaseException) -> BaseException:
    """The code under test's own exception, unwrapped from a FormulaError."""
    return error.error if isinstance(error, FormulaError) else error

"""The one exception type the app shows to its user as a message, not a traceback."""


class LabError(Exception):
    """A problem with the user's settings or environment, said in words they can act on."""

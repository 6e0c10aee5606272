"""The one exception type the command line turns into a one-line message and exit code 2."""


class FedcondError(Exception):
    """A problem with the user's input or environment, explained in one line."""


class DatasetMissing(FedcondError):
    """A dataset file is not in the data directory."""


class ChecksumMismatch(FedcondError):
    """A file's sha256 differs from the expected one; the file is never used."""

"""The one exception type the command line turns into a one-line message and exit code 2."""


class FedcondError(Exception):
    """A problem with the user's input or environment, explained in one line."""


class DatasetMissing(FedcondError):
    """A dataset file is not in the data directory."""


class ChecksumMismatch(FedcondError):
    """A file's sha256 differs from the expected one; the file is never used."""


# A command that ran but could not do all it was asked (a method failed, a sweep's cells could not
# start): each is recorded or named, and the exit status says so. Bad input stays exit 2 (cli.py).
EXIT_INCOMPLETE = 1

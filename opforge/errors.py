"""The error types opforge raises, for users to catch."""


class OpforgeError(Exception):
    """Base of every error opforge raises."""


class BuildError(OpforgeError):
    """A library failed to compile or link.

    The message starts with the compiler's first error at the user's own ``file:line``;
    ``log`` holds the whole compiler output and ``command`` the command that failed.
    """

    def __init__(self, message: str, log: str = "", command: str = "", where: str = ""):
        super().__init__(message + (f"\n\n({where}the full log is in .log, the command in .command)"
                                    if where or log else ""))
        self.message = message   # without the note on .log and .command (the command line has files)
        self.where = where
        self.log = log
        self.command = command


class CacheError(OpforgeError):
    """The cache folder cannot be used safely (wrong owner, open permissions, unwritable)."""


class OpError(OpforgeError, RuntimeError):
    """An op's infer, workspace or compute function reported a failure."""


class OpArgumentError(OpforgeError, TypeError):
    """An op was called with inputs, outputs or attributes its schema does not allow: too few or
    too many, an absent required one, a dtype or rank it does not take. The message names the op
    and the argument."""


class OpMemoryError(OpError, MemoryError):
    """An op's output or workspace for these inputs is larger than memory can hold: its byte
    count overflows, or allocating it failed. The message names the op (and node) and the size."""

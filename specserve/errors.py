"""Errors with messages meant for the user: each names the file, option or request field at fault."""


class SpecServeError(Exception):
    """Base class for every error specserve raises on purpose."""


class ModelLoadError(SpecServeError):
    """A checkpoint folder is missing files, has corrupt files or an unsupported config."""


class IncompatibleDraftError(ModelLoadError):
    """A draft model does not fit the target (vocabulary, hidden size, layer ids...)."""


class OptionError(SpecServeError, ValueError):
    """An option has an unknown name or an invalid value."""


class InvalidRequestError(SpecServeError, ValueError):
    """A request cannot be served as given (bad sampling values, empty prompt...).

    `param` names the request field at fault when it is not the prompt."""

    def __init__(self, message: str, param: str | None = None):
        super().__init__(message)
        self.param = param


class ContextOverflowError(InvalidRequestError):
    """The prompt (plus what must be generated) does not fit the context window."""

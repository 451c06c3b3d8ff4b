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
    """A request cannot be served as given (bad sampling values, empty prompt...)."""


class ContextOverflowError(InvalidRequestError):
    """The prompt (plus what must be generated) does not fit the context window."""

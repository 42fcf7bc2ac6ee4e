"""Exceptions shared across envhub. Which one is raised decides the episode's outcome."""


class ToolError(Exception):
    """A tool failed because of what the agent asked (missing file, bad path): shown to it."""


class InfraError(Exception):
    """Our side broke (sandbox died, service unreachable). Ends the episode as ``env_error``."""


class EpisodeFinishedError(RuntimeError):
    """``step`` was called with no episode running (before ``reset`` or after ``done``)."""


class EngineError(RuntimeError):
    """The model engine failed or aborted a request. Ends the episode as ``engine_error``."""


class ContextOverflowError(RuntimeError):
    """The next turn would not fit the model's context. Ends the episode as ``context_overflow``."""

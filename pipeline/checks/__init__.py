"""Checks of what the stages wrote, run as commands (`python -m pipeline.checks.negatives OUT`, ...)."""
from __future__ import annotations

from pipeline.options import UsageError
from pipeline.sources.files import InputFileError
from pipeline.urls import cut

# What an unreadable folder, report or captions file raises: a check says it in one line and exits 2.
CHECK_INPUT_ERRORS = (OSError, ValueError, KeyError, TypeError, RecursionError, InputFileError, UsageError)


def one_line(error: BaseException) -> str:
    text = str(error).strip() or type(error).__name__
    if isinstance(error, KeyError):
        return f"no {text} where the check reads it (the report, or a row of its tables)"
    if isinstance(error, OSError) and not error.strerror:  # pyarrow's FileNotFoundError of a FIFO: only a path
        text = f"{text}: cannot be read as a file ({type(error).__name__})"
    return cut(text.splitlines()[0], 300)

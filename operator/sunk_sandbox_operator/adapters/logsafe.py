"""The last line of defence for log records: nothing a library quoted, no known secret value.

A filter on the handlers of the root logger (where kopf's formatter writes every record, ours,
kopf's and the libraries'), so it sees each record once, whoever logged it:
- an exception passed as the message or an argument is said by `core.redact.describe`;
- a traceback (`log.exception`, `exc_info=True`) keeps its frames, but each exception's line in it
  (chained ones too) is `describe`d: the line Python prints is `str(exc)`, which for h11 is the
  refused header value;
- then every known secret value (`core.redact.Redactor`: the tokens this process read) in the
  final message and traceback is replaced.
"""

from __future__ import annotations

import logging
import traceback

from ..core.redact import Redactor, describe

MAX_CHAIN = 8      # exceptions of one chain shown (cause / context)
MAX_FRAMES = 40    # frames of each


def safe_traceback(exc: BaseException) -> str:
    """The traceback Python would print, with each exception's own line `describe`d."""
    chain: list[tuple[BaseException, str]] = []
    seen: set[int] = set()
    current: BaseException | None = exc
    link = ""
    while current is not None and id(current) not in seen and len(chain) < MAX_CHAIN:
        seen.add(id(current))
        chain.append((current, link))
        if current.__cause__ is not None:
            current, link = current.__cause__, "The above exception was the direct cause of the following exception:"
        elif current.__context__ is not None and not current.__suppress_context__:
            current, link = current.__context__, "During handling of the above exception, another exception occurred:"
        else:
            current = None
    parts: list[str] = []
    for i, (e, _) in enumerate(reversed(chain)):
        if i:
            parts.append("\n" + chain[len(chain) - i][1] + "\n\n")
        frames = traceback.extract_tb(e.__traceback__, limit=-MAX_FRAMES) if e.__traceback__ else []
        if frames:
            parts.append("Traceback (most recent call last):\n" + "".join(traceback.format_list(frames)))
        kind = type(e)
        parts.append(f"{kind.__module__}.{kind.__qualname__}: {describe(e)}")
    return "".join(parts)


def _safe_arg(value: object) -> object:
    return describe(value) if isinstance(value, BaseException) else value


class SafeRecords(logging.Filter):
    def __init__(self, redactor: Redactor | None = None) -> None:
        super().__init__()
        self.redactor = redactor if redactor is not None else Redactor()

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.msg, BaseException):
            record.msg = describe(record.msg)
        if isinstance(record.args, tuple):
            record.args = tuple(_safe_arg(a) for a in record.args)
        elif isinstance(record.args, dict):
            record.args = {k: _safe_arg(v) for k, v in record.args.items()}
        exc = record.exc_info[1] if record.exc_info else None
        if exc is not None:
            record.exc_text = safe_traceback(exc)
            record.exc_info = None
        if self.redactor:
            try:
                message = record.getMessage()
            except Exception:  # noqa: BLE001 - a bad format string: logging reports it, we add nothing
                return True
            redacted = self.redactor.redact(message)
            if redacted != message:
                record.msg, record.args = redacted, None
            if record.exc_text:
                record.exc_text = self.redactor.redact(record.exc_text)
        return True


def install(redactor: Redactor, logger: logging.Logger | None = None) -> SafeRecords:
    """One SafeRecords on every handler of `logger` (default: the root logger, after kopf configured
    it); an earlier one is replaced."""
    target = logger if logger is not None else logging.getLogger()
    flt = SafeRecords(redactor)
    for handler in target.handlers:
        for old in [f for f in handler.filters if isinstance(f, SafeRecords)]:
            handler.removeFilter(old)
        handler.addFilter(flt)
    return flt

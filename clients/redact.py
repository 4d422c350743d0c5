"""Credentials never reach a log (DESIGN §11): one pattern for tokens and keys in headers,
URLs and text, as a function and as a ``logging.Filter``."""

from __future__ import annotations

import logging
import re

# An Authorization / api-key header's value, a key, token or URL signature in a query string, a
# benchmark token (``mpe_…``) anywhere; group 1 is the part that stays.
PATTERN = re.compile(r"((?:authorization|proxy-authorization):\s*(?:bearer|basic)?\s*|(?:api-key|x-goog-api-key):\s*"
                     r"|[?&](?:key|access_token|token|api_key|sig)=|\bmpe_(?=[A-Za-z0-9_-]{32}))[^\s&\"']+",
                     re.IGNORECASE)


def redact(text: str) -> str:
    """``text`` with every credential the pattern knows replaced by ``***``."""
    return PATTERN.sub(lambda m: m.group(1) + "***", text)


class RedactSecrets(logging.Filter):
    """Masks credentials in the records of the logger it is added to (transport libraries log
    request headers and URLs at debug level). Where masking the arguments one by one gives the
    masked message, the record keeps its arguments in their places (formatters such as uvicorn's
    access log unpack them); otherwise it becomes the masked message alone."""

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            msg = record.getMessage()
        except Exception:
            return True
        red = redact(msg)
        if red == msg:
            return True
        if isinstance(record.args, tuple) and isinstance(record.msg, str):
            args = tuple(_masked(a) for a in record.args)
            try:
                if record.msg % args == red:
                    record.args = args
                    return True
            except (TypeError, ValueError):
                pass
        record.msg, record.args = red, ()
        return True


def _masked(arg: object) -> object:
    if arg is None or isinstance(arg, (bool, int, float)):
        return arg
    text = str(arg)
    red = redact(text)
    return arg if red == text else red

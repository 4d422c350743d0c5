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
    request headers and URLs at debug level). A record's arguments keep their places (formatters
    such as uvicorn's access log unpack them): each argument that holds a credential is replaced
    by its masked text."""

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.msg, str):
            record.msg = redact(record.msg)
        if isinstance(record.args, tuple):
            record.args = tuple(_masked(a) for a in record.args)
        elif isinstance(record.args, dict):
            record.args = {k: _masked(v) for k, v in record.args.items()}
        return True


def _masked(arg: object) -> object:
    if arg is None or isinstance(arg, (bool, int, float)):
        return arg
    text = str(arg)
    red = redact(text)
    return arg if red == text else red

"""The checks every edge applies to text and numbers from outside.

Forms, query and path parameters and study files go through these before anything
reaches the database, so a NUL byte, a control character, a string longer than its
column or a number beyond its column answers a clear 4xx instead of a database error
(PostgreSQL refuses NUL in text and integers past 2^31; SQLite's driver raises
OverflowError past 2^63). `app.main` maps what still slips through (a DataError) to 400.
"""

from __future__ import annotations

import re
from functools import partial
from typing import Annotated

from pydantic import AfterValidator, BaseModel, ConfigDict, Field

# INTEGER columns (ids, caps, counts) on PostgreSQL; BIGINT ones (seeds) hold 2^63 - 1.
INT32_MAX = 2**31 - 1
INT64_MAX = 2**63 - 1
# users.username; a password longer than this is nobody's (argon2 would hash any length).
MAX_USERNAME = 64
MAX_PASSWORD = 1024
# A cap of HITs per annotator (the paper: 200).
MAX_CAP = 1_000_000

# C0 and C1 control characters, DEL and lone surrogates (which no encoder accepts); text
# that may span lines keeps tab, line feed and carriage return.
_CONTROL_LINE = re.compile(r"[\x00-\x1f\x7f-\x9f\ud800-\udfff]")
_CONTROL_TEXT = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\ud800-\udfff]")
_ASCII_INT = re.compile(r"[+-]?[0-9]{1,30}")


class BadInput(ValueError):
    """A value from outside that cannot be accepted; `field` names where it came from."""

    def __init__(self, message: str, field: str = "") -> None:
        super().__init__(f"{field}: {message}" if field else message)
        self.message = message
        self.field = field


def check_text(value: str, *, max_length: int, multiline: bool = False, field: str = "") -> str:
    """`value` unchanged if it fits its column: at most `max_length` characters and no
    control characters (tab and line breaks allowed where `multiline`); else BadInput."""
    if len(value) > max_length:
        raise BadInput(f"is longer than {max_length} characters", field)
    if (_CONTROL_TEXT if multiline else _CONTROL_LINE).search(value):
        raise BadInput("contains control characters (such as NUL) that are not allowed", field)
    return value


def parse_int(text: str, *, ge: int, le: int, field: str = "") -> int:
    """A whole number written in ASCII digits, within ``[ge, le]``; else BadInput.

    Python's ``int()`` also reads other scripts' digits (``int("١٢") == 12``), and
    ``str.isdigit()`` is true for ``"²"``, which ``int()`` then refuses.
    """
    text = text.strip()
    if not _ASCII_INT.fullmatch(text):
        raise BadInput("must be a whole number", field)
    value = int(text)
    if not ge <= value <= le:
        raise BadInput(f"must be between {ge} and {le}", field)
    return value


def _pydantic_text(value: str, *, multiline: bool) -> str:
    if (_CONTROL_TEXT if multiline else _CONTROL_LINE).search(value):
        raise ValueError("contains control characters (such as NUL) that are not allowed")
    return value


def Line(max_length: int):
    """A pydantic string type: one line of at most `max_length` characters."""
    return Annotated[
        str,
        Field(max_length=max_length),
        AfterValidator(partial(_pydantic_text, multiline=False)),
    ]


def Text(max_length: int):
    """A pydantic string type: text of at most `max_length` characters, line breaks allowed."""
    return Annotated[
        str,
        Field(max_length=max_length),
        AfterValidator(partial(_pydantic_text, multiline=True)),
    ]


class Section(BaseModel):
    """A section of a study file (``app.studies.schemas``, and a study type's own, e.g.
    ``app.studytypes.ratings.config``): unknown keys are refused, and so are infinity and
    NaN (valid TOML floats; no setting means anything with them)."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

"""The one NaN rule of the results: how a figure that cannot be computed is written.

A figure without a value (an empty cell, a ratio over zero, an interval or a test with
one annotator) is NaN while it is computed with, and an interval without a finite end
is ±inf. Whatever the service writes -- the API's JSON, ``ebc results --format json``,
the results CSV (an empty cell), the dashboard's pages (a dash) -- writes it as
``null``: :func:`finite_or_none` is that rule, and nothing else in the results converts.
Where a page or a plot writes an interval's end in words, :func:`bound_text` writes it
(``∞``, ``5.4·10⁷``).

:data:`Figure` is ``float`` to the statistics. Pydantic writes it through
:func:`finite_or_none` in JSON mode (FastAPI's responses, :func:`jsonable`), reads
``null`` back as NaN, and documents it as ``number | null`` in the OpenAPI document.
"""

from __future__ import annotations

import functools
import math
from typing import Annotated, Any

from pydantic import BeforeValidator, PlainSerializer, TypeAdapter


def finite_or_none(x: float | None) -> float | None:
    """``x`` as a float when it is a finite number; None for None, NaN and ±inf."""
    return float(x) if x is not None and math.isfinite(x) else None


def missing(x: Any) -> bool:
    """Whether a reader should show ``x`` as "no value": None, or a float that
    :func:`finite_or_none` writes as null."""
    return x is None or (isinstance(x, float) and finite_or_none(x) is None)


_SUPERSCRIPT = str.maketrans("-0123456789", "⁻⁰¹²³⁴⁵⁶⁷⁸⁹")


def bound_text(x: float | None, *, high: bool = True) -> str:
    """An interval end as the plot and the page write it: ``∞`` (or 0 for a missing low
    end of a ratio), 3 significant digits, or ``5.4·10⁷`` from 10,000 up."""
    if x is None or not math.isfinite(x):
        return "∞" if high else "0"
    if x != 0 and not 1e-3 <= abs(x) < 1e4:
        exp = math.floor(math.log10(abs(x)))
        mant = x / 10**exp
        return f"{mant:.2g}·10{str(exp).translate(_SUPERSCRIPT)}"
    return f"{x:.3g}"


def _nan_if_none(x: Any) -> Any:
    return math.nan if x is None else x


Figure = Annotated[
    float,
    BeforeValidator(_nan_if_none),
    PlainSerializer(finite_or_none, return_type=float | None, when_used="json"),
]
"""A number of the results that may be NaN or ±inf (JSON: ``null``)."""


@functools.cache
def _adapter(tp: type) -> TypeAdapter:
    return TypeAdapter(tp)


def jsonable(obj: Any) -> Any:
    """A results object (a dataclass of the statistics or a response model) as the
    plain values of its JSON: the same conversion the API's responses go through."""
    return _adapter(type(obj)).dump_python(obj, mode="json")

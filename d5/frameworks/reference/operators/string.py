"""Reference string operators (ONNX semantics, newest opset): StringNormalizer, StringConcat, StringSplit,
RegexFullMatch.

ONNX string tensors are numpy object arrays of Python ``str`` (``bytes`` elements and numpy ``U``/``S`` arrays
are accepted too and decoded as UTF-8); string outputs are object arrays of ``str``. None of these operators
has a gradient (``Gradient.NONE``).

Differences from other runtimes, kept on purpose:

* RegexFullMatch uses Python's :mod:`re` (``re.fullmatch``) where ONNX specifies RE2 syntax. The common syntax
  agrees; Python additionally accepts backreferences and lookaround (RE2 rejects them), and a few escapes
  differ (``\\pN``/``\\p{Greek}`` classes and ``\\C`` are RE2-only, ``\\Z`` means end-of-text in Python but is
  unsupported in RE2, and ``\\w``/``\\d``/``\\s``/``\\b`` are Unicode-aware in Python but ASCII-only in RE2).
  A pattern Python cannot compile raises :class:`~d5.errors.ShapeError` when the operator is created.
* StringNormalizer follows the ONNX text and onnxruntime: stop words remove whole elements (not words inside an
  element), empty strings are kept, accents are left alone (``onnx.reference`` strips accents, splits on
  spaces and drops empty strings). Case changes map each character to one character (Unicode simple case
  mapping, as onnxruntime's per-character ``towupper``): ``"straße"`` upper-cases to ``"STRAßE"``, not
  ``"STRASSE"``. The ``locale`` attribute is accepted and ignored (Python's Unicode tables are used).

>>> import numpy as np
>>> from d5.frameworks.reference.operators import create_operator
>>> create_operator("StringConcat", {}).forward([np.array(["a", "b"], object), np.array(["!"], object)])
array(['a!', 'b!'], dtype=object)
>>> substrings, counts = create_operator("StringSplit", {"delimiter": "-"}).forward([np.array(["a-b", "c"], object)])
>>> substrings.tolist(), counts.tolist()
([['a', 'b'], ['c', '']], [2, 1])
"""
from __future__ import annotations

import re
from typing import Any, Callable

import numpy as np

from d5.errors import ShapeError
from d5.frameworks.reference.operators import ReferenceOp, register
from d5.frameworks.reference.operators.elementwise import broadcast_error
from d5.ops.onnx_semantics import as_text
from d5.ops.operator import Gradient


def _strings(op_name: str, x: Any, name: str = "X") -> np.ndarray:
    """``x`` as an object array of ``str``; a ShapeError unless it is a string tensor."""
    x = np.asarray(x)
    if x.dtype.kind not in "OUS":
        raise ShapeError(f"{op_name}: input {name} must be a string tensor, got dtype {x.dtype}")
    out = np.empty(x.shape, dtype=object)
    flat = out.reshape(-1)
    for i, value in enumerate(x.reshape(-1)):
        if not isinstance(value, (str, bytes, np.str_, np.bytes_)):
            raise ShapeError(f"{op_name}: input {name} must hold strings, found {type(value).__name__} {value!r}")
        flat[i] = as_text(value)
    return out


def _map(function: Callable[[str], Any], x: np.ndarray, dtype) -> np.ndarray:
    out = np.empty(x.shape, dtype=dtype)
    flat = out.reshape(-1)
    for i, value in enumerate(x.reshape(-1)):
        flat[i] = function(value)
    return out


# ------------------------------------------------------------------------------------------ StringConcat

@register("StringConcat")
class StringConcat(ReferenceOp):
    """``X + Y`` elementwise on string tensors, with numpy broadcasting."""

    gradient = Gradient.NONE

    def forward(self, inputs):
        x, y = _strings("StringConcat", inputs[0], "X"), _strings("StringConcat", inputs[1], "Y")
        try:
            return np.asarray(np.add(x, y), dtype=object)  # object arrays add with Python's str.__add__
        except ValueError:
            raise broadcast_error("StringConcat", x, y) from None


# ------------------------------------------------------------------------------------------- StringSplit

@register("StringSplit")
class StringSplit(ReferenceOp):
    """Split each string on ``delimiter`` (at most ``maxsplit`` times), as Python's ``str.split``.

    Outputs: ``Y`` (the input's shape plus one axis as long as the most substrings of any element; shorter
    rows are padded with ``""``) and ``Z`` (int64, the number of substrings of each element). An unset or empty
    ``delimiter`` splits on runs of whitespace and drops leading and trailing whitespace (also from the unsplit
    rest left by ``maxsplit``). An empty element gives no substrings. Both as onnxruntime; ``onnx.reference``
    (Python's ``str.split``) keeps the rest's trailing whitespace and gives ``[""]`` for an empty element
    split on an explicit delimiter.
    """

    gradient = Gradient.NONE

    def __init__(self, delimiter: Any = None, maxsplit: int | None = None) -> None:
        super().__init__()
        delimiter = None if delimiter is None else as_text(delimiter)
        self.delimiter = delimiter or None
        if maxsplit is not None and int(maxsplit) < 0:
            raise ShapeError(f"StringSplit: maxsplit must be >= 0, got {maxsplit}")
        self.maxsplit = -1 if maxsplit is None else int(maxsplit)

    def _split(self, text: str) -> list[str]:
        if self.delimiter is None:  # strip first: the unsplit remainder after maxsplit loses trailing whitespace too
            return text.strip().split(None, self.maxsplit)
        return text.split(self.delimiter, self.maxsplit) if text else []

    def forward(self, inputs):
        x = _strings("StringSplit", inputs[0])
        parts = _map(self._split, x, object)
        counts = _map(len, parts, np.int64)
        width = int(counts.max(initial=0))
        out = np.full((x.size, width), "", dtype=object)
        for i, pieces in enumerate(parts.reshape(-1)):
            out[i, :len(pieces)] = pieces
        return out.reshape(x.shape + (width,)), counts


# ---------------------------------------------------------------------------------------- RegexFullMatch

@register("RegexFullMatch")
class RegexFullMatch(ReferenceOp):
    """True where the whole element matches ``pattern`` (Python ``re.fullmatch``; ONNX specifies RE2, see the
    module notes for the differences)."""

    gradient = Gradient.NONE

    def __init__(self, pattern: Any = None) -> None:
        super().__init__()
        if pattern is None:
            raise ShapeError("RegexFullMatch: the pattern attribute is required")
        try:
            self.regex = re.compile(as_text(pattern))
        except re.error as err:
            raise ShapeError(f"RegexFullMatch: invalid pattern {as_text(pattern)!r}: {err}") from None

    def forward(self, inputs):
        x = _strings("RegexFullMatch", inputs[0])
        return _map(lambda s: self.regex.fullmatch(s) is not None, x, np.bool_)


# -------------------------------------------------------------------------------------- StringNormalizer

_SIMPLE_LOWER = {"\u0130": "i"}  # İ: the one character whose full lowercase mapping is longer than one character


def _upper(text: str) -> str:
    """Per-character (simple) upper case: characters whose full mapping expands (ß -> SS) stay as they are."""
    return "".join(u if len(u := c.upper()) == 1 else c for c in text)


def _lower(text: str) -> str:
    """Per-character (simple) lower case; also gives a lone final sigma the non-final form, as towlower."""
    return "".join(_SIMPLE_LOWER.get(c) or (low if len(low := c.lower()) == 1 else c) for c in text)


@register("StringNormalizer")
class StringNormalizer(ReferenceOp):
    """Drop the elements of a ``[C]`` or ``[1, C]`` string tensor that are ``stopwords`` (compared ignoring case
    unless ``is_case_sensitive``), then upper-case, lower-case or keep the rest (``case_change_action``).
    If every element is dropped the output is ``[""]`` (shape ``[1]`` or ``[1, 1]``)."""

    gradient = Gradient.NONE

    _ACTIONS = {"NONE": None, "LOWER": _lower, "UPPER": _upper}

    def __init__(self, case_change_action: Any = "NONE", is_case_sensitive: int = 0, locale: Any = None,
                 stopwords: Any = None) -> None:
        super().__init__()
        action = as_text(case_change_action)
        if action not in self._ACTIONS:
            raise ShapeError(f"StringNormalizer: case_change_action must be NONE, LOWER or UPPER, got {action!r}")
        self.change_case = self._ACTIONS[action]
        self.case_sensitive = bool(is_case_sensitive)
        self.locale = None if locale is None else as_text(locale)
        words = [as_text(w) for w in (stopwords or [])]
        self.stopwords = set(words) if self.case_sensitive else {_lower(w) for w in words}

    def forward(self, inputs):
        x = _strings("StringNormalizer", inputs[0])
        if not (x.ndim == 1 or (x.ndim == 2 and x.shape[0] == 1)) or x.size == 0:
            raise ShapeError(f"StringNormalizer: input must have shape [C] or [1, C] with C > 0, got {list(x.shape)}")
        key = (lambda s: s) if self.case_sensitive else _lower
        kept = [s for s in x.reshape(-1) if key(s) not in self.stopwords]
        if self.change_case is not None:
            kept = [self.change_case(s) for s in kept]
        out = np.empty(len(kept) or 1, dtype=object)
        out[:] = kept or [""]
        return out.reshape(x.shape[:-1] + (-1,))

"""Which operator types a :class:`d5.Network` accepts.

A network is ONNX-compatible, so it accepts every operator of ONNX's default domain, plus the operators
d5 defines itself in the ``ai.d5`` domain (for example ``MeanSquaredError``), plus user operators added
with :meth:`d5.Network.add_custom_node`. Whether a framework *implements* an operator is checked when
an executor is built, not here.
"""
from __future__ import annotations

import difflib
import functools

from d5.errors import UnsupportedOperatorError

#: The domain of the operators d5 defines beyond ONNX.
D5_DOMAIN = "ai.d5"
#: The domain of user-written operators (the node carries the operator object).
CUSTOM_DOMAIN = "ai.d5.custom"

#: d5's own operators: op type -> one-line description.
D5_OPERATORS = {
    "MeanSquaredError": "mean (or sum) of squared differences between prediction and target",
}


@functools.lru_cache(maxsize=1)
def onnx_operator_types() -> frozenset[str]:
    """Op types of ONNX's default domain known to the installed ``onnx`` package."""
    import onnx.defs  # lazy: onnx is only needed once a graph is edited

    return frozenset(s.name for s in onnx.defs.get_all_schemas_with_history() if s.domain in ("", "ai.onnx"))


def known_operator_types() -> list[str]:
    """Every operator type a d5 Network accepts, sorted: ONNX's default domain (as the installed ``onnx``
    knows it) and d5's own. The one count of "operators d5 knows"; how many of them a framework implements
    is that framework's ``supported_operators()`` (``d5 operators`` shows both).

    >>> "Conv" in known_operator_types() and "MeanSquaredError" in known_operator_types()
    True
    """
    return sorted(onnx_operator_types() | set(D5_OPERATORS))


def resolve_domain(op_type: str, domain: str | None) -> str:
    """Return the domain ``op_type`` belongs to, or raise :class:`UnsupportedOperatorError`."""
    if domain in (None, "", "ai.onnx"):
        if op_type in onnx_operator_types():
            return ""
        if op_type in D5_OPERATORS:
            return D5_DOMAIN
    elif domain == D5_DOMAIN and op_type in D5_OPERATORS:
        return D5_DOMAIN
    known = known_operator_types()
    close = difflib.get_close_matches(op_type, known, n=3)
    hint = f" Did you mean {' or '.join(map(repr, close))}?" if close else ""
    # "known", not "supported": which of these a framework implements is checked when its executor is built.
    raise UnsupportedOperatorError(
        f"unknown operator type {op_type!r} (domain {domain or 'ai.onnx'!r}).{hint} "
        f"d5 knows {len(known)} operator types, ONNX's default domain and d5's own ({', '.join(D5_OPERATORS)}): "
        f"{', '.join(known)}. For an operator of your own, use Network.add_custom_node(op, inputs, outputs)."
    )

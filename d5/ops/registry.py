"""L0: the operator registry every framework uses to map ONNX operators to its own implementations.

A framework keeps one :class:`OperatorRegistry`. Each implementation is a class (a :class:`d5.ops.CustomOp`
for the reference framework, a converter for a native one) registered for one or more ONNX op types *since*
an opset: where an operator's semantics changed between opsets (Softmax normalized a flattened 2-D view
before opset 13 and one axis from 13 on), the framework registers one class per version, as onnx's own
reference implementation does (``Softmax_1``, ``Softmax_13``), and :meth:`OperatorRegistry.create` picks
the newest version not newer than the node's opset. Classes take the node's ONNX attributes as keyword
arguments; missing attributes take the defaults of that version.

>>> from d5.ops import CustomOp
>>> registry = OperatorRegistry("example")
>>> @registry.register("Double")
... class Double(CustomOp):
...     def forward(self, inputs):
...         return inputs[0] * 2
>>> @registry.register("Double", since=13)
... class DoubleTwice(Double):
...     def forward(self, inputs):
...         return inputs[0] * 4
>>> registry.create("Double", {}, opset=12).forward([1]), registry.create("Double", {}, opset=17).forward([1])
(2, 4)
>>> registry.versions("Double")
[1, 13]
"""
from __future__ import annotations

import bisect
import importlib
import importlib.util
from typing import Any, Callable, Mapping, Sequence

from d5.errors import UnsupportedOperatorError

#: Stands for "the newest opset" when a caller gives none (operators built outside a network).
LATEST_OPSET = 10_000


class OperatorRegistry:
    """ONNX op type -> implementation class, by the opset since which each version applies.

    ``load`` imports the modules whose ``@registry.register`` decorators fill the table; it runs on the
    first lookup, so importing a framework does not import all its operators.
    """

    def __init__(self, framework: str, load: Callable[[], Any] | None = None) -> None:
        self.framework = framework
        self._load = load
        self._loaded = load is None
        # op type -> ([since, ...] ascending, [class, ...] in the same order)
        self._versions: dict[str, tuple[list[int], list[type]]] = {}

    @classmethod
    def of_package(cls, framework: str, package: str, categories: Sequence[str]) -> "OperatorRegistry":
        """The registry of a framework's operators package ``package``: importing its modules ``categories``
        registers their operators, on the first lookup (not when the framework is imported)."""
        def load() -> None:
            for name in categories:
                importlib.import_module(f"{package}.{name}")
        return cls(framework, load=load)

    def register(self, *op_types: str, since: int = 1) -> Callable[[type], type]:
        """Class decorator: make the class the implementation of ``op_types`` from opset ``since`` on."""
        if not op_types or isinstance(since, bool) or not isinstance(since, int) or since < 1:
            raise ValueError(f"register needs op types and an opset since >= 1, got {op_types!r}, since={since!r}")

        def decorate(cls: type) -> type:
            for op_type in op_types:
                sinces, classes = self._versions.setdefault(op_type, ([], []))
                if since in sinces:
                    raise RuntimeError(f"{self.framework} operator {op_type!r} registered twice for opset {since}")
                index = bisect.bisect(sinces, since)
                sinces.insert(index, since)
                classes.insert(index, cls)
            return cls

        return decorate

    def supported(self) -> list[str]:
        """Sorted op types this framework implements (at some opset)."""
        self._ensure_loaded()
        return sorted(self._versions)

    def versions(self, op_type: str) -> list[int]:
        """The opsets at which ``op_type``'s implementation changes (ascending); empty if unsupported."""
        self._ensure_loaded()
        return list(self._versions.get(op_type, ([], []))[0])

    def lookup(self, op_type: str, opset: int | None = None) -> type:
        """The class implementing ``op_type`` at ``opset`` (None: the newest), or UnsupportedOperatorError."""
        self._ensure_loaded()
        entry = self._versions.get(op_type)
        if entry is None:
            raise UnsupportedOperatorError(
                f"the {self.framework} framework has no implementation of operator {op_type!r}; "
                f"it implements: {', '.join(sorted(self._versions))}")
        sinces, classes = entry
        index = bisect.bisect(sinces, LATEST_OPSET if opset is None else opset) - 1
        if index < 0:
            raise UnsupportedOperatorError(
                f"operator {op_type!r} at opset {opset}: the {self.framework} framework implements it from opset "
                f"{sinces[0]} on; convert the model to a newer opset (onnx.version_converter)")
        return classes[index]

    def create(self, op_type: str, attributes: Mapping[str, Any], opset: int | None = None) -> Any:
        """Instantiate the implementation of ``op_type`` at ``opset`` with the node's ``attributes``.

        The instance's ``opset`` attribute records the opset it was built for (None: the newest)."""
        cls = self.lookup(op_type, opset)
        try:
            op = cls(**attributes)
        except TypeError as err:
            raise UnsupportedOperatorError(
                f"operator {op_type!r}: unsupported attributes {sorted(attributes)}: {err}") from None
        op.opset = opset
        return op

    def _ensure_loaded(self) -> None:
        if not self._loaded:
            self._loaded = True  # before loading: the modules' decorators call register, not lookups
            self._load()


def present_categories(package: str, categories: Sequence[str]) -> tuple[str, ...]:
    """The ``categories`` with a module in package ``package`` (a framework has converters for those only; the
    file names are the reference's), without importing them."""
    return tuple(name for name in categories if importlib.util.find_spec(f"{package}.{name}") is not None)


#: Input shapes a converter keeps shape-derived plans for (see :func:`memoized_plan`).
MAX_PLANS = 64


def memoized_plan(owner: Any, key: Any, make: Callable[..., Any], *args: Any) -> Any:
    """``make(*args)``, memoized on ``owner`` per ``key`` (the input shapes it depends on): what a converter derives
    from shapes (window geometry, padding, divisors) is computed once per shape, not at every call or trace; at most
    :data:`MAX_PLANS` kept, so inputs of ever new shapes do not grow memory."""
    plans = owner.__dict__.get("_plans")
    if plans is None:
        plans = owner.__dict__["_plans"] = {}
    plan = plans.get(key)
    if plan is None:
        if len(plans) >= MAX_PLANS:
            plans.clear()
        plan = plans[key] = make(*args)
    return plan

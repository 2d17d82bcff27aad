"""Kernel-geometry cases: direct calls of d5._C's kernels (float32 and float64).

Half of the calls are valid (small, consistent geometry: they must succeed and match the NumPy oracle);
the other half replace one to three geometry values by hostile ones (zero, negative, 2**28, 2**31, 2**32,
2**62, 2**63 - 1, ...) and must end in a clean refusal (ValueError / TypeError / OverflowError from the
binding, or MemoryError) or, when the kernel accepts them, still match the oracle. The arrays themselves
stay small: hostile values go into the sizes the kernels are told (``out``, ``image_shape``,
``input_shape``, strides, pads, dilations, groups), which is where an overflow would corrupt memory.

>>> case = fixed_kernel_cases()[0]
>>> case["kind"], case["function"]
('kernel', 'im2col')
"""
from __future__ import annotations

import numpy as np
from hypothesis import strategies as st

HOSTILE_INTS = (0, -1, -2, 2**28, 2**31 - 1, 2**31, 2**32 - 1, 2**32, 2**62, 2**63 - 1, -2**31, -2**63)
# Too large for int64: the binding must refuse them during argument conversion.
OUT_OF_RANGE_INTS = (2**63, 2**64)

FUNCTIONS = ("im2col", "col2im", "conv2d_forward", "conv2d_backward", "max_pool2d_forward", "max_pool2d_backward",
             "avg_pool2d_forward", "avg_pool2d_backward", "global_avg_pool_forward", "global_avg_pool_backward",
             "batch_norm_forward_training", "batch_norm_forward_inference", "batch_norm_backward_training",
             "batch_norm_backward_inference")

# Geometry fields that only describe (never allocate) and so may take any hostile value, and the array
# dimensions, which may only become 0 (an array of 2**31 elements is not cheap).
SCALAR_FIELDS = ("sh", "sw", "pt", "pl", "pb", "pr", "dh", "dw", "oh", "ow", "groups", "kh", "kw")
ARRAY_FIELDS = ("n", "c", "h", "w", "m")
POOL_KERNEL_FIELDS = ("kh", "kw")  # pooling takes the kernel as numbers, convolution from w's shape

# The NumPy oracle loops over output positions and taps in Python: skip it beyond this much work.
ORACLE_WORK_LIMIT = 60_000


def out_size(size: int, pad_begin: int, pad_end: int, kernel: int, stride: int, dilation: int) -> int:
    """ONNX's floor formula, in Python integers (never overflows)."""
    if stride <= 0:
        return 0
    return (size + pad_begin + pad_end - ((kernel - 1) * dilation + 1)) // stride + 1


def _valid_geometry(draw) -> dict:
    groups = draw(st.integers(1, 2))
    g = {"n": draw(st.integers(0, 2)), "c": groups * draw(st.integers(1, 2)), "m": groups * draw(st.integers(1, 2)),
         "groups": groups, "h": draw(st.integers(1, 7)), "w": draw(st.integers(1, 7)),
         "kh": draw(st.integers(1, 4)), "kw": draw(st.integers(1, 4)), "sh": draw(st.integers(1, 3)),
         "sw": draw(st.integers(1, 3)), "dh": draw(st.integers(1, 3)), "dw": draw(st.integers(1, 3)),
         "pt": draw(st.integers(0, 2)), "pl": draw(st.integers(0, 2)), "pb": draw(st.integers(0, 2)),
         "pr": draw(st.integers(0, 2))}
    for axis, (size, kernel, dilation) in {"h": ("h", "kh", "dh"), "w": ("w", "kw", "dw")}.items():
        if out_size(g[size], g["p" + ("t" if axis == "h" else "l")], g["p" + ("b" if axis == "h" else "r")],
                    g[kernel], g["s" + axis], g[dilation]) < 1:
            g[kernel], g[dilation] = 1, 1  # a 1-tap kernel always fits
    g["oh"] = out_size(g["h"], g["pt"], g["pb"], g["kh"], g["sh"], g["dh"])
    g["ow"] = out_size(g["w"], g["pl"], g["pr"], g["kw"], g["sw"], g["dw"])
    return g


def _hostile(draw, g: dict, function: str) -> str:
    """Overwrite one to three fields of ``g`` with hostile values; returns what was changed."""
    fields = list(SCALAR_FIELDS + ARRAY_FIELDS)
    if function.startswith("conv2d"):
        fields = [f for f in fields if f not in POOL_KERNEL_FIELDS]  # the kernel is w's shape there
    changed = []
    for field in draw(st.lists(st.sampled_from(fields), min_size=1, max_size=3, unique=True)):
        if field in ARRAY_FIELDS:
            g[field] = 0
        else:
            g[field] = draw(st.sampled_from(HOSTILE_INTS + OUT_OF_RANGE_INTS) if draw(st.integers(0, 9)) == 0
                            else st.sampled_from(HOSTILE_INTS))
        changed.append(f"{field}={g[field]}")
    if draw(st.booleans()) and not ({"oh", "ow"} & {c.split("=")[0] for c in changed}):
        # Recompute out from the hostile geometry: what an attacker does to pass a consistency check.
        g["oh"] = out_size(g["h"], g["pt"], g["pb"], g["kh"], g["sh"], g["dh"])
        g["ow"] = out_size(g["w"], g["pl"], g["pr"], g["kw"], g["sw"], g["dw"])
        changed.append(f"out recomputed=({g['oh']}, {g['ow']})")
    return ", ".join(changed)


def _array(rng: np.random.Generator, shape, dtype, strided: bool = False) -> np.ndarray:
    if strided and len(shape) and shape[-1]:
        return rng.standard_normal((*shape[:-1], 2 * shape[-1])).astype(dtype)[..., ::2]
    return rng.standard_normal(shape).astype(dtype)


def _product(*sizes: int) -> int:
    """The product with every size taken as at least 1, or -1 if a size is negative."""
    total = 1
    for size in sizes:
        if size < 0:
            return -1
        total *= max(size, 1)
    return total


def _cheap(*shape: int, limit: int = 1 << 20) -> bool:
    """True when an array of ``shape`` can be allocated here without thought."""
    if any(s < 0 or s > 2**31 for s in shape):  # NumPy refuses a huge dimension even beside a zero
        return False
    total = 1
    for s in shape:
        total *= s
    return total <= limit


@st.composite
def kernel_case(draw) -> dict:
    function = draw(st.sampled_from(FUNCTIONS))
    dtype = np.dtype(draw(st.sampled_from(["float32", "float64"])))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    g = _valid_geometry(draw)
    valid = draw(st.booleans())
    change = "valid geometry" if valid else _hostile(draw, g, function)
    strided = draw(st.integers(0, 7)) == 0
    args, kwargs, work = _arguments(draw, function, g, dtype, rng, strided, valid)
    description = f"d5._C.{function} {dtype.name}: {change}; geometry {_describe(g)}"
    return {"kind": "kernel", "function": function, "args": args, "kwargs": kwargs, "label": function,
            "threads": draw(st.sampled_from([1, 2, 3, 4])), "valid": valid,
            "oracle": 0 <= work <= ORACLE_WORK_LIMIT, "description": description}


def _describe(g: dict) -> str:
    return (f"N={g['n']} C={g['c']} M={g['m']} H={g['h']} W={g['w']} kernel=({g['kh']}, {g['kw']}) "
            f"strides=({g['sh']}, {g['sw']}) pads=({g['pt']}, {g['pl']}, {g['pb']}, {g['pr']}) "
            f"dilations=({g['dh']}, {g['dw']}) out=({g['oh']}, {g['ow']}) groups={g['groups']}")


def _arguments(draw, function: str, g: dict, dtype, rng, strided: bool, valid: bool):
    """The call's positional and keyword arguments, and the oracle's work (-1: no oracle)."""
    kernel, strides = (g["kh"], g["kw"]), (g["sh"], g["sw"])
    pads_begin, pads4 = (g["pt"], g["pl"]), (g["pt"], g["pl"], g["pb"], g["pr"])
    dilations, out = (g["dh"], g["dw"]), (g["oh"], g["ow"])
    image = (g["n"], g["c"], g["h"], g["w"])
    x = _array(rng, image, dtype, strided)
    taps = g["kh"] * g["kw"]
    # The oracle loops over every output position of every tap even when N, C or M is 0: never let a zero
    # hide a 2**32-long loop.
    work = _product(g["n"], g["c"], g["kh"], g["kw"], g["oh"], g["ow"])
    if function == "im2col":
        return (x, kernel, strides, pads_begin, dilations, out), {"batch_major": draw(st.booleans())}, work
    if function == "col2im":
        batch_major = draw(st.booleans())
        rows, cols = g["c"] * taps, g["oh"] * g["ow"]
        shape = (g["n"], rows, cols) if batch_major else (rows, g["n"] * cols)
        columns = _array(rng, shape, dtype) if _cheap(*shape) else _array(rng, (1, 1, 1), dtype)
        return (columns, image, kernel, strides, pads_begin, dilations, out), {"batch_major": batch_major}, work
    if function in ("conv2d_forward", "conv2d_backward"):
        groups = g["groups"]
        weight_shape = (g["m"], g["c"] // groups if groups > 0 and g["c"] % groups == 0 else g["c"], g["kh"], g["kw"])
        w = _array(rng, weight_shape, dtype) if _cheap(*weight_shape) else _array(rng, (1, 1, 1, 1), dtype)
        if function == "conv2d_forward":
            bias = _array(rng, (g["m"],), dtype) if draw(st.booleans()) else None
            return (x, w, bias, strides, pads_begin, dilations, out, groups), {}, work * max(g["m"], 1) if work >= 0 else -1
        dy_shape = (g["n"], g["m"], g["oh"], g["ow"])
        dy = _array(rng, dy_shape, dtype) if _cheap(*dy_shape) else _array(rng, (1, 1, 1, 1), dtype)
        if not valid and draw(st.integers(0, 3)) == 0:
            dy = _array(rng, (g["n"] + 1, g["m"], 1, 1), dtype)  # disagrees with x on N
        work = _product(*dy.shape, g["c"], g["kh"], g["kw"])
        return (dy, x, w, strides, pads_begin, dilations, groups, draw(st.booleans()), draw(st.booleans())), {}, work
    pool_work = work
    if function == "max_pool2d_forward":
        return (x, kernel, strides, pads4, dilations, out), {}, pool_work
    if function == "avg_pool2d_forward":
        return (x, kernel, strides, pads4, dilations, out, draw(st.booleans())), {}, pool_work
    if function in ("max_pool2d_backward", "avg_pool2d_backward"):
        dy_shape = (g["n"], g["c"], g["oh"], g["ow"])
        dy = _array(rng, dy_shape, dtype) if _cheap(*dy_shape) else _array(rng, (1, 1, 2, 2), dtype)
        if function == "avg_pool2d_backward":
            return (dy, image, kernel, strides, pads4, dilations, draw(st.booleans())), {}, pool_work
        # Each plane's indices point into its own plane (or are -1, an empty window), as the forward makes them.
        plane, total = g["h"] * g["w"], g["n"] * g["c"] * g["h"] * g["w"]
        planes = np.arange(dy.shape[0] * dy.shape[1]).reshape(dy.shape[0], dy.shape[1], 1, 1)
        indices = planes * plane + rng.integers(0, max(plane, 1), size=dy.shape)
        indices = np.where(rng.random(dy.shape) < 0.1, -1, indices).astype(np.int64)
        if not valid:
            indices.flat[: draw(st.integers(0, min(3, indices.size)))] = draw(
                st.sampled_from([-2, total, total + 1, 2**31, 2**62, 2**63 - 1, -2**63]))
        return (dy, indices, image), {}, int(dy.size)
    if function == "global_avg_pool_forward":
        rank = draw(st.integers(3 if valid else 1, 5))
        shape = (g["n"], g["c"], g["h"], g["w"], 2)[:rank]
        return (_array(rng, shape, dtype, strided),), {}, int(np.prod(shape))
    if function == "global_avg_pool_backward":
        rank = draw(st.integers(3 if valid else 1, 5))
        input_shape = [g["n"], g["c"], g["h"], g["oh"], g["ow"]][:rank]
        dy_shape = (g["n"], g["c"]) + (1,) * max(rank - 2, 0)
        dy = _array(rng, dy_shape, dtype) if _cheap(*dy_shape) else _array(rng, (1, 1, 1), dtype)
        cheap = _cheap(*input_shape, limit=ORACLE_WORK_LIMIT)
        return (dy, input_shape), {}, int(np.prod(input_shape)) if cheap else -1
    return _batch_norm_arguments(draw, function, g, dtype, rng, valid)


def _batch_norm_arguments(draw, function: str, g: dict, dtype, rng, valid: bool):
    n, c, s = g["n"], g["c"], g["h"] * g["w"] if g["h"] >= 0 and g["w"] >= 0 else 0
    x = _array(rng, (n, c, s), dtype)
    channel = [_array(rng, (c,), dtype) for _ in range(3)]
    var = np.abs(_array(rng, (c,), dtype)) + dtype.type(0.5)
    epsilon = 1e-5 if valid else draw(st.sampled_from([1e-5, 0.0, -1.0, float("nan"), float("inf"), 1e300]))
    if not valid and draw(st.booleans()):
        channel[draw(st.integers(0, 2))] = _array(rng, (max(0, c + draw(st.sampled_from([-1, 1, 5]))),), dtype)
    scale, bias, mean = channel
    dy = _array(rng, (n, c, s), dtype)
    work = n * c * s
    if function == "batch_norm_forward_training":
        return (x, scale, bias, epsilon), {}, work
    if function == "batch_norm_forward_inference":
        return (x, scale, bias, mean, var, epsilon), {}, work
    if function == "batch_norm_backward_training":
        invstd = (1.0 / np.sqrt(var)).astype(dtype)
        return (dy, x, scale, mean, invstd), {}, work
    return (dy, x, scale, mean, var, epsilon), {}, work


def fixed_kernel_cases() -> list[dict]:
    """The kernel reproducers from issue 7 (and their close relatives), as kernel cases."""
    ones = np.ones((1, 1, 3, 3), np.float32)
    cases = []
    for dilations, out in (((2**62, 2**62), (2, 2)), ((2**31, 1), (2, 2)), ((2**32, 2**32), (1, 1)),
                           ((2**62, 1), (1, 1)), ((1, 2**63 - 1), (1, 2))):
        for batch_major in (True, False):
            cases.append({"kind": "kernel", "function": "im2col", "label": "im2col",
                          "args": (ones, (2, 2), (1, 1), (0, 0), dilations, out), "kwargs": {"batch_major": batch_major},
                          "description": f"issue 7: d5._C.im2col with a huge dilation {dilations}, out {out}, "
                                         f"batch_major={batch_major}"})
    cases.append({"kind": "kernel", "function": "conv2d_forward", "label": "conv2d_forward",
                  "args": (np.ones((1, 1, 1, 1), np.float32), np.ones((1, 1, 1, 1), np.float32), None,
                           (2**32, 2**32), (2**32 - 1, 2**32 - 1), (1, 1), (1, 1), 1),
                  "description": "issue 7: conv2d_forward float32, strides 2**32, pads_begin 2**32-1 (packed path)"})
    cases.append({"kind": "kernel", "function": "conv2d_forward", "label": "conv2d_forward", "oracle": False,
                  "args": (np.ones((1, 1, 1, 1)), np.ones((1, 1, 316, 316)), None, (1, 1), (316, 316), (1, 1),
                           (318, 318), 1),
                  "description": "issue 7: conv2d_forward float64, X (1,1,1,1), W (1,1,316,316), pads 316: "
                                 "a 10**10-element column matrix"})
    cases.append({"kind": "kernel", "function": "conv2d_forward", "label": "conv2d_forward", "oracle": False,
                  "args": (np.ones((0, 1, 1, 1), np.float32), np.ones((1, 1, 1, 1), np.float32), None, (1, 1),
                           (2**28, 2**28), (1, 1), (2**29 + 1, 2**29 + 1), 1),
                  "description": "issue 7: conv2d_forward with N=0 and pads 2**28"})
    cases.append({"kind": "kernel", "function": "conv2d_backward", "label": "conv2d_backward",
                  "args": tuple(np.random.default_rng(0).standard_normal(s).astype(np.float32)
                                for s in ((8, 2, 4, 4), (8, 3, 6, 6), (2, 3, 3, 3))) + ((1, 1), (0, 0), (1, 1), 1, True, True),
                  "threads": 4, "valid": True,
                  "description": "issue 7: conv2d_backward weight gradient must be the same bits at 4 threads and 1"})
    one = np.ones((1, 1, 1, 1))
    cases += [
        {"kind": "kernel", "function": "im2col", "label": "im2col", "args": (one, (1, 1), (1, 2**63 - 1), (0, 2), (1, 1), (1, 1)),
         "description": "fuzz: im2col stride 2**63-1 with pad 2: the tap range's ceiling division overflows (SIGSEGV)"},
        {"kind": "kernel", "function": "max_pool2d_forward", "label": "max_pool2d_forward",
         "args": (one, (1, 1), (1, 1), (2, 0, 0, 0), (2**63 - 1, 1), (1, 1)),
         "description": "fuzz: max_pool2d_forward dilation 2**63-1, an all-padding window: uninitialized output, "
                        "not -inf"},
        {"kind": "kernel", "function": "global_avg_pool_forward", "label": "global_avg_pool_forward",
         "args": (np.ones((0, 2, 3, 3), np.float32),), "valid": True,
         "description": "fuzz: global_avg_pool_forward refuses an empty batch ('empty spatial extent')"},
    ]
    return cases

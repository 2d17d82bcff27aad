"""NonMaxSuppression on 27,000 candidate boxes: the reference operator against onnxruntime (issue 7, item 5b),
on two box sets, with the two runtimes alternating call by call:

1. ``detection``: what a torchvision detector exports (SSDlite: 90 classes x 300 candidates, merged into one
   NMS by offsetting each class's boxes, IoU threshold 0.55, no output limit);
2. ``uniform``: boxes of 10-100 pixels scattered uniformly over a 320x320 image, IoU threshold 0.5, no output
   limit (large boxes, so many candidate pairs overlap: the harder case for a vectorized sweep).

The selections are also compared (they must be identical).

    python benchmarks/nms.py --repeats 10 --output results/nms.json
"""
from __future__ import annotations

import argparse
import time

import numpy as np

from d5.bench.environment import capture_environment
from d5.bench.results import write_result
from d5.bench.stats import compare, summarize

BOXES = 27_000


def detection_boxes(rng: np.random.Generator) -> np.ndarray:
    """(BOXES, 4) ``[y1, x1, y2, x2]``: 90 classes of 300 boxes around 5 objects each, class c shifted by 400c."""
    classes = np.repeat(np.arange(90), BOXES // 90)
    objects = rng.random((90, 5, 2)) * 320
    centers = objects[classes, rng.integers(0, 5, BOXES)] + rng.normal(0, 8, (BOXES, 2))
    sizes = 20 + rng.random((BOXES, 2)) * 60
    corners = np.concatenate([centers - sizes / 2, centers + sizes / 2], axis=1) + (400.0 * classes)[:, None]
    return corners[:, [1, 0, 3, 2]]


def uniform_boxes(rng: np.random.Generator) -> np.ndarray:
    corner = rng.random((BOXES, 2)) * 320
    return np.concatenate([corner, corner + 10 + rng.random((BOXES, 2)) * 90], axis=1)[:, [1, 0, 3, 2]]


def inputs(kind: str, seed: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    boxes = (detection_boxes if kind == "detection" else uniform_boxes)(rng)
    iou = 0.55 if kind == "detection" else 0.5
    return [boxes[None].astype(np.float32), rng.random((1, 1, BOXES)).astype(np.float32),
            np.array([BOXES], np.int64), np.array([iou], np.float32)]


def onnxruntime_session():
    import onnxruntime as ort
    from onnx import TensorProto, helper

    names = ["boxes", "scores", "max_output_boxes_per_class", "iou_threshold"]
    types = [TensorProto.FLOAT, TensorProto.FLOAT, TensorProto.INT64, TensorProto.FLOAT]
    graph = helper.make_graph([helper.make_node("NonMaxSuppression", names, ["selected"])], "nms",
                              [helper.make_tensor_value_info(n, t, None) for n, t in zip(names, types)],
                              [helper.make_tensor_value_info("selected", TensorProto.INT64, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 11)], ir_version=8)
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return lambda feeds: session.run(None, dict(zip(names, feeds)))[0]


def times(feeds: list[np.ndarray], repeats: int) -> tuple[list[float], list[float], bool, int]:
    """d5 and onnxruntime seconds per call (alternating, after one warm-up call each), whether the
    selections are identical, and how many boxes were selected."""
    from d5.frameworks.reference.operators import create_operator

    op = create_operator("NonMaxSuppression", {})
    run_ort = onnxruntime_session()
    ours, theirs = op.forward(feeds), run_ort(feeds)
    d5_times, ort_times = [], []
    for _ in range(repeats):
        start = time.perf_counter()
        run_ort(feeds)
        ort_times.append(time.perf_counter() - start)
        start = time.perf_counter()
        op.forward(feeds)
        d5_times.append(time.perf_counter() - start)
    return d5_times, ort_times, bool(np.array_equal(ours, theirs)), len(theirs)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--output", default="results/nms.json")
    args = parser.parse_args()

    figures = {"candidate_boxes": BOXES}
    for kind in ("detection", "uniform"):
        d5_times, ort_times, equal, selected = times(inputs(kind, args.seed), args.repeats)
        ratio = compare(d5_times, ort_times)  # d5 time / onnxruntime time
        print(f"{kind}: {selected} of {BOXES} boxes kept; d5 {summarize(d5_times).format('s')}, onnxruntime "
              f"{summarize(ort_times).format('s')}; d5 takes {ratio} of onnxruntime's time; identical: {equal}")
        figures.update({f"{kind}_selected_boxes": selected, f"{kind}_identical_to_onnxruntime": equal,
                        f"{kind}_reference_seconds": summarize(d5_times),
                        f"{kind}_onnxruntime_seconds": summarize(ort_times),
                        f"{kind}_time_ratio_reference_over_onnxruntime": ratio})
    path = write_result(args.output, "nms", figures, environment=capture_environment(seeds={"boxes": args.seed}),
                        extra={"repeats": args.repeats})
    print(f"wrote {path}")


if __name__ == "__main__":
    main()

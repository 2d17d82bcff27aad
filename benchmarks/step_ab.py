"""The reference framework's training step, this checkout against another d5 source tree (a previous commit),
alternating process by process: did a change make the step slower?

Each sample is one fresh process that imports d5 from one tree, trains LeNet-5 (batch 64, momentum SGD, synthetic
Fashion-MNIST-sized data) for a warm-up, then times blocks of steps and reports the median step time. The two
trees alternate, so drift of the machine hits both alike; the figure is the ratio of medians (this tree / the
baseline) with a bootstrap confidence interval. The baseline tree needs its compiled extension (build it with
``python setup.py build_ext --inplace`` there, or copy ``d5/_C*.so`` when csrc/ did not change).

    git archive <commit> | tar -x -C /tmp/base && cp d5/_C*.so /tmp/base/d5/
    python benchmarks/step_ab.py --baseline /tmp/base --rounds 8 --output results/step_ab.json
"""
from __future__ import annotations

import argparse
import json
import os
import pathlib
import subprocess
import sys

from d5.bench.environment import capture_environment
from d5.bench.results import write_result
from d5.bench.stats import compare, summarize

HERE = pathlib.Path(__file__).resolve().parents[1]

# Run in the child process with PYTHONPATH set to one tree; prints the median step time in seconds. (No braces
# other than the str.format fields.)
CHILD = """
import json, time, numpy as np, d5
from d5.frameworks import reference
executor = reference.from_model(d5.models.lenet5())
optimizer = reference.MomentumOptimizer(executor, lr=0.01, momentum=0.9)
rng = np.random.default_rng(0)
batch = dict(input=rng.normal(size=(64, 1, 28, 28)).astype(np.float32), label=rng.integers(0, 10, 64))
for _ in range(20):
    optimizer.step(batch)
blocks = []
for _ in range({blocks}):
    start = time.perf_counter()
    for _ in range({steps}):
        optimizer.step(batch)
    blocks.append((time.perf_counter() - start) / {steps})
print(json.dumps(float(np.median(blocks))))
"""


def step_seconds(tree: pathlib.Path, blocks: int, steps: int) -> float:
    env = {**os.environ, "PYTHONPATH": str(tree)}
    out = subprocess.run([sys.executable, "-c", CHILD.format(blocks=blocks, steps=steps)], env=env, cwd=tree,
                         check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--baseline", required=True, type=pathlib.Path, help="the other d5 source tree")
    parser.add_argument("--rounds", type=int, default=8, help="processes per tree (alternating)")
    parser.add_argument("--blocks", type=int, default=7)
    parser.add_argument("--steps", type=int, default=50, help="steps per timed block")
    parser.add_argument("--output", default="results/step_ab.json")
    args = parser.parse_args()
    if not (args.baseline / "d5" / "__init__.py").is_file():
        parser.error(f"--baseline {args.baseline} is not a d5 source tree (no d5/__init__.py)")
    current, baseline = [], []
    for round_ in range(args.rounds):
        current.append(step_seconds(HERE, args.blocks, args.steps))
        baseline.append(step_seconds(args.baseline, args.blocks, args.steps))
        print(f"round {round_ + 1}/{args.rounds}: this tree {current[-1] * 1e3:.2f} ms/step, "
              f"baseline {baseline[-1] * 1e3:.2f} ms/step", flush=True)
    ratio = compare(current, baseline)
    print(f"step time, this tree / baseline: {ratio}")
    write_result(args.output, "step_ab", {
        "this_tree_step_seconds": summarize(current), "baseline_step_seconds": summarize(baseline),
        "step_time_ratio_this_over_baseline": ratio,
    }, environment=capture_environment(seeds={"data": 0}), extra={key: str(value) for key, value in vars(args).items()})


if __name__ == "__main__":
    main()

"""The fuzz suite: its generators and fixed cases, shared by test_fuzz.py (the fast subset that runs with
the test suite) and run_fuzz.py (the long run behind ``make fuzz``).

>>> sorted(GENERATORS)
['kernel_geometry', 'onnx_mutation', 'op_geometry']
"""
from __future__ import annotations

from typing import Callable

from fuzz_engine import FuzzEngine, Tally, run_cases, run_generated
from fuzz_fixed_cases import fixed_onnx_cases
from fuzz_kernel_cases import fixed_kernel_cases, kernel_case
from fuzz_onnx_geometry import op_geometry_case
from fuzz_onnx_mutations import onnx_mutation_case

#: name -> hypothesis strategy factory (one case per example)
GENERATORS: dict[str, Callable] = {
    "onnx_mutation": onnx_mutation_case,
    "op_geometry": op_geometry_case,
    "kernel_geometry": kernel_case,
}
FIXED = "fixed"


def fixed_cases() -> list[dict]:
    """The issue's reproducers and the unmutated seeds, with ids, under the generator name ``fixed``."""
    cases = fixed_onnx_cases() + fixed_kernel_cases()
    return [dict(case, id=f"{FIXED}:{index}", generator=FIXED) for index, case in enumerate(cases)]


def run_suite(engine: FuzzEngine, examples: dict[str, int], seed: int, tally: Tally, with_fixed: bool = True,
              progress: Callable[[dict, dict], None] | None = None) -> Tally:
    """Run the fixed cases (if ``with_fixed``) and ``examples[name]`` generated cases of each generator."""
    if with_fixed:
        run_cases(engine, fixed_cases(), tally, progress)
    for name, count in examples.items():
        if count > 0:
            run_generated(engine, name, GENERATORS[name](), count, seed, tally, progress)
    return tally

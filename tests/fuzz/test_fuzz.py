"""The fuzz suite's fast subset: the issue-7 reproducers, every seed model, and a few hundred generated
cases per generator, each run in a worker subprocess (so a crash is a failing test, not a dead runner).

Every test asserts zero crashes, hangs, raw exceptions and wrong results, and prints its outcome table
(``pytest -s`` shows it; a failure shows it with the findings). The long run is run_fuzz.py.
"""
import pytest

from fuzz_engine import FuzzEngine, Tally, run_cases
from fuzz_suite import fixed_cases, run_suite

pytestmark = pytest.mark.fuzz

SEED = 20240607
# Sized so that the module stays well under a minute on one loaded core.
FAST_EXAMPLES = {"onnx_mutation": 300, "op_geometry": 150, "kernel_geometry": 300}


@pytest.fixture(scope="module")
def engine():
    with FuzzEngine(timeout=60) as engine:
        yield engine


def assert_no_findings(tally: Tally) -> None:
    print(f"\n{tally.table()}")
    assert tally.bad_total() == 0, f"fuzz findings:\n{tally.table()}\n\n{tally.findings_report()}"


def test_issue_reproducers_and_seed_models(engine):
    tally = Tally()
    run_cases(engine, fixed_cases(), tally)
    assert sum(tally.counts["fixed"].values()) == len(fixed_cases())
    assert_no_findings(tally)


@pytest.mark.parametrize("generator", sorted(FAST_EXAMPLES))
def test_generated_cases(engine, generator):
    tally = run_suite(engine, {generator: FAST_EXAMPLES[generator]}, SEED, Tally(), with_fixed=False)
    assert sum(tally.counts[generator].values()) >= FAST_EXAMPLES[generator] // 2  # hypothesis may stop early
    assert_no_findings(tally)


@pytest.mark.parametrize("action, outcome, detail", [
    ("segfault", "crash", "SIGSEGV"),
    ("abort", "crash", "SIGABRT"),
    ("raise", "raw_exception", "IndexError"),
    ("d5_error", "d5_error", "ShapeError"),
    ("allocate", "memory_error", "MemoryError"),
])
def test_the_engine_records_misbehaviour_and_goes_on(engine, action, outcome, detail):
    result = engine.run({"kind": "selftest", "action": action})
    assert result["outcome"] == outcome
    assert detail in result["detail"]
    assert engine.run({"kind": "selftest", "action": "none"})["outcome"] == "ok"  # a fresh worker if needed


def test_a_case_that_does_not_answer_is_a_hang():
    with FuzzEngine(timeout=2) as engine:
        result = engine.run({"kind": "selftest", "action": "hang"})
        assert (result["outcome"], result["stage"]) == ("hang", "hang")
        assert engine.run({"kind": "selftest", "action": "none"})["outcome"] == "ok"


def test_findings_are_grouped_with_a_reproducer(engine):
    from fuzz_repro import reproducer_script

    tally = Tally()
    case = {"kind": "selftest", "action": "raise", "id": "selftest:0", "generator": "selftest", "label": "selftest"}
    for _ in range(2):
        tally.add(case, engine.run(case))
    assert tally.bad_total() == 2 and len(tally.findings) == 1
    (finding,) = tally.findings.values()
    assert finding["count"] == 2 and "IndexError" in finding["signature"]
    kernel_case = {"kind": "kernel", "function": "im2col", "args": (None,), "id": "k"}
    compile(reproducer_script(kernel_case), "reproducer", "exec")

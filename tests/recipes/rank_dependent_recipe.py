"""tests/recipes/tiny_mlp_recipe.py made to misbehave on rank 1 (``PMI_RANK``, set by MPICH's mpiexec), for
tests/distributed/test_launch.py; ``D5_TEST_RANK_MODE`` says how:

* ``batch``: rank 1 builds the recipe with another batch size (a recipe that depends on the rank), which every
  rank must refuse before training;
* ``fail``: rank 1 raises a d5 error at its second training step, while rank 0 waits for it in an allreduce: the
  job must end at once instead of hanging.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import d5  # noqa: E402
from d5.errors import D5Error  # noqa: E402
from tiny_mlp_recipe import FIXED, METRICS, MUTABLE  # noqa: E402

RANK = int(os.environ.get("PMI_RANK", "0"))
MODE = os.environ.get("D5_TEST_RANK_MODE", "")


class FailOnRankOne(d5.TrainerEvent):
    """Raises a d5 error on rank 1 after its second step (the other ranks go on into the next allreduce)."""

    def after_step(self, trainer, step, outputs):
        if RANK == 1 and step == 1:
            raise D5Error("rank 1 fails on purpose after step 1")


mutable = dict(MUTABLE)
if MODE == "batch" and RANK == 1:
    mutable["batch_size"] = 16
if MODE == "fail":
    mutable["events"] = list(MUTABLE["events"]) + [FailOnRankOne()]

if __name__ == "__main__":
    d5.run_recipe(FIXED, mutable, METRICS, progress=False) or exit(1)

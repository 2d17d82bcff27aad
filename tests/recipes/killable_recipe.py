"""tiny_mlp_recipe, plus a test-only event: with D5_TEST_KILL_AT_STEP=K in the environment the process SIGKILLs
itself right after optimizer step K (after that step's checkpoint, if one is due): a crash mid-epoch."""
import os
import signal
import sys
from pathlib import Path

import d5

sys.path.insert(0, str(Path(__file__).parent))
from tiny_mlp_recipe import FIXED, METRICS, MUTABLE  # noqa: E402


class KillAt(d5.TrainerEvent):
    hook_order = 1000  # after the Checkpoint event (hook_order 100)

    def __init__(self, step):
        self.step = step

    def after_step(self, trainer, step, outputs):
        if trainer.steps == self.step:
            os.kill(os.getpid(), signal.SIGKILL)


if __name__ == "__main__":
    events = list(MUTABLE["events"])
    if os.environ.get("D5_TEST_KILL_AT_STEP"):
        events.append(KillAt(int(os.environ["D5_TEST_KILL_AT_STEP"])))
    d5.run_recipe(FIXED, {**MUTABLE, "events": events}, METRICS, progress=False) or exit(1)

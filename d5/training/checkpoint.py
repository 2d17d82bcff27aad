"""Checkpoints: a training run's whole state in one file, written atomically, resumed bitwise.

A checkpoint holds the network's parameters (trainable ones and running statistics), the state of the
trainer -- and through it of the optimizer, the sampler and the stateful events (their ``state_dict()``) --
and every random stream: Python's ``random``, NumPy's global generator, and the executor's own (Dropout masks;
:meth:`d5.frameworks.base.FrameworkExecutor.random_state`). Resuming from it on the reference framework gives
final parameters bitwise identical to an uninterrupted run's.

The file (``step-000001234.d5ckpt``) is a zip archive: ``manifest.json`` (format and d5 version, the network's
fingerprint and parameter table, the step, the state's structure) and one ``.npy`` member per array. It is
written to a temporary file and renamed, so a run killed while saving leaves the previous checkpoint intact;
the zip's CRCs catch a corrupted file when it is read. A checkpoint of another network, a damaged file or one
of a newer format is refused with a :class:`d5.errors.CheckpointError` that says why.

>>> import tempfile, numpy as np, d5
>>> from d5.frameworks import reference
>>> executor = reference.from_model(d5.models.mlp((4,), hidden=(3,), num_classes=2))
>>> path = save_checkpoint(tempfile.mkdtemp() + "/run.d5ckpt", executor, step=7)
>>> before = executor.network.fetch_tensor("fc2.weight").copy()
>>> executor.network.feed_tensor("fc2.weight", np.zeros_like(before))
>>> restore_checkpoint(load_checkpoint(path), executor).step
7
>>> bool((executor.network.fetch_tensor("fc2.weight") == before).all())
True
"""
from __future__ import annotations

import base64
import dataclasses
import hashlib
import io
import json
import os
import random
import re
import zipfile
from pathlib import Path
from typing import Any, Mapping

import numpy as np

from d5.errors import CheckpointError, D5Error
from d5.io_utils import atomic_write
from d5.training.events import TrainerEvent

FORMAT = "d5-checkpoint"
#: Bumped when the layout changes incompatibly; files of a newer version are refused.
FORMAT_VERSION = 1
SUFFIX = ".d5ckpt"
_NAME = re.compile(r"^step-(\d+)\.d5ckpt$")


# ---------------------------------------------------------------------- the network's identity
def parameter_table(graph: Any) -> dict[str, list]:
    """``{name: [shape, dtype, trainable]}`` of every parameter of ``graph`` (a d5.Network)."""
    return {name: [list(np.shape(value)), str(np.asarray(value).dtype), bool(graph.is_trainable(name))]
            for name, value in graph.params.items()}


def network_fingerprint(graph: Any) -> str:
    """A hash of what makes two networks the same for a checkpoint: inputs, outputs, nodes (operator, wiring,
    attributes) and the parameters' names, shapes and dtypes -- not their values.

    >>> import d5
    >>> network_fingerprint(d5.models.lenet5(seed=0)) == network_fingerprint(d5.models.lenet5(seed=1))
    True
    >>> network_fingerprint(d5.models.lenet5()) == network_fingerprint(d5.models.mlp((784,)))
    False
    """
    description = {
        "inputs": [[info.name, [str(d) for d in info.shape] if info.shape is not None else None, str(info.dtype)]
                   for info in graph.inputs.values()],
        "outputs": list(graph.outputs),
        "nodes": [[node.name, node.op_type, node.domain, list(node.inputs), list(node.outputs),
                   sorted((key, repr(value)) for key, value in node.attrs.items())] for node in graph.nodes],
        "params": parameter_table(graph),
    }
    return hashlib.sha256(json.dumps(description, sort_keys=True, default=repr).encode()).hexdigest()


# ---------------------------------------------------------------------- state <-> JSON + arrays
def _encode(value: Any, arrays: dict[str, np.ndarray], where: str) -> Any:
    """``value`` as JSON, its arrays moved to ``arrays`` (tuples, bytes, non-str dict keys and NumPy scalars
    tagged so that decoding gives back exactly the same types)."""
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, float):
        return value if np.isfinite(value) else {"__float__": repr(value)}
    if isinstance(value, (np.ndarray, np.generic)):
        array = np.asarray(value)
        if array.dtype.hasobject:
            raise D5Error(f"checkpoint: {where} is an object array; a state_dict holds numeric arrays only")
        key = f"a{len(arrays)}"
        arrays[key] = array
        return {"__array__": key, "scalar": isinstance(value, np.generic)}
    if isinstance(value, bytes):
        return {"__bytes__": base64.b64encode(value).decode()}
    if isinstance(value, tuple):
        return {"__tuple__": [_encode(v, arrays, f"{where}[{i}]") for i, v in enumerate(value)]}
    if isinstance(value, list):
        return [_encode(v, arrays, f"{where}[{i}]") for i, v in enumerate(value)]
    if isinstance(value, Mapping):
        if all(isinstance(k, str) for k in value) and not any(k.startswith("__") for k in value):
            return {k: _encode(v, arrays, f"{where}.{k}") for k, v in value.items()}
        return {"__items__": [[_encode(k, arrays, f"{where} key"), _encode(v, arrays, f"{where}[{k!r}]")]
                              for k, v in value.items()]}
    raise D5Error(f"checkpoint: {where} is a {type(value).__name__}; a state_dict holds numbers, strings, lists, "
                  "dicts and NumPy arrays only")


def _decode(value: Any, arrays: Mapping[str, np.ndarray]) -> Any:
    if isinstance(value, list):
        return [_decode(v, arrays) for v in value]
    if not isinstance(value, dict):
        return value
    if "__array__" in value:
        array = arrays[value["__array__"]]
        return array[()] if value.get("scalar") else array
    if "__float__" in value:
        return float(value["__float__"])
    if "__bytes__" in value:
        return base64.b64decode(value["__bytes__"])
    if "__tuple__" in value:
        return tuple(_decode(v, arrays) for v in value["__tuple__"])
    if "__items__" in value:
        return {_decode(k, arrays): _decode(v, arrays) for k, v in value["__items__"]}
    return {k: _decode(v, arrays) for k, v in value.items()}


# ---------------------------------------------------------------------- saving and loading
@dataclasses.dataclass
class LoadedCheckpoint:
    """A checkpoint read back: its ``manifest`` and the decoded ``state`` (``network``, ``trainer``,
    ``random``, ...); ``step`` is the number of optimizer steps taken when it was saved."""

    path: Path
    manifest: dict
    state: dict

    @property
    def step(self) -> int:
        return int(self.manifest["step"])


def random_state(executor: Any = None) -> dict:
    """Python's, NumPy's global and (given) the executor's random streams."""
    state = {"python": random.getstate(), "numpy": np.random.get_state()}
    if executor is not None and callable(getattr(executor, "random_state", None)):
        state["executor"] = executor.random_state()
    return state


def set_random_state(state: Mapping[str, Any], executor: Any = None) -> None:
    """Restore what :func:`random_state` returned."""
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    if executor is not None and state.get("executor") is not None:
        executor.set_random_state(state["executor"])


def save_checkpoint(path: str | os.PathLike, executor: Any, trainer: Any = None, step: int | None = None,
                    **components: Any) -> Path:
    """Write a checkpoint of ``executor``'s network (and ``trainer``'s state, and any other ``components``
    that have ``state_dict()``, e.g. ``optimizer=``/``sampler=`` when training without a Trainer) to ``path``
    atomically; ``step`` defaults to ``trainer.steps``. Returns the path."""
    graph = executor.network.graph
    names = list(graph.params)
    values = executor.network.fetch_tensors(names)
    state: dict[str, Any] = {"network": {name: np.array(value, copy=True) for name, value in zip(names, values)},
                             "random": random_state(executor)}
    if trainer is not None:
        state["trainer"] = trainer.state_dict()
    for name, component in components.items():
        if component is not None:
            state[name] = component.state_dict()
    if step is None:
        step = int(getattr(trainer, "steps", 0) or 0)
    arrays: dict[str, np.ndarray] = {}
    encoded = _encode(state, arrays, "state")
    manifest = {"format": FORMAT, "format_version": FORMAT_VERSION, "d5_version": _d5_version(), "step": int(step),
                "network": {"name": graph.name, "fingerprint": network_fingerprint(graph),
                            "params": parameter_table(graph)},
                "framework": type(executor).__module__.split(".")[2] if type(executor).__module__.startswith(
                    "d5.frameworks.") else type(executor).__name__,
                "state": encoded}
    path = Path(path)
    with atomic_write(path, "wb") as handle:
        with zipfile.ZipFile(handle, "w", zipfile.ZIP_STORED) as archive:
            archive.writestr("manifest.json", json.dumps(manifest))
            for key, array in arrays.items():
                buffer = io.BytesIO()
                np.save(buffer, array, allow_pickle=False)  # not ascontiguousarray: NumPy 1.x makes 0-d arrays 1-d
                archive.writestr(f"arrays/{key}.npy", buffer.getvalue())
    return path


def load_checkpoint(path: str | os.PathLike) -> LoadedCheckpoint:
    """Read a checkpoint, refusing (CheckpointError) a missing, truncated, corrupted or newer-format file."""
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"no checkpoint at {str(path)!r}")
    try:
        with zipfile.ZipFile(path) as archive:
            manifest = json.loads(archive.read("manifest.json"))
            if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
                raise CheckpointError(f"{path}: not a d5 checkpoint (no {FORMAT!r} manifest)")
            version = manifest.get("format_version")
            if not isinstance(version, int) or version > FORMAT_VERSION:
                raise CheckpointError(f"{path}: checkpoint format {version!r} (written by d5 "
                                      f"{manifest.get('d5_version')}) is newer than this d5's ({FORMAT_VERSION}, d5 "
                                      f"{_d5_version()}); resume it with that d5 version")
            arrays = {}
            for name in archive.namelist():
                if name.startswith("arrays/") and name.endswith(".npy"):
                    arrays[name[len("arrays/"):-len(".npy")]] = np.load(io.BytesIO(archive.read(name)),
                                                                        allow_pickle=False)
    except CheckpointError:
        raise
    except (zipfile.BadZipFile, KeyError, json.JSONDecodeError, ValueError, EOFError, OSError) as err:
        raise CheckpointError(f"{path}: the checkpoint is corrupt or truncated ({type(err).__name__}: {err}); "
                              "delete it to resume from an earlier one, or start afresh") from None
    try:
        state = _decode(manifest["state"], arrays)
        int(manifest["step"])
        manifest["network"]["fingerprint"]
    except (KeyError, TypeError, ValueError) as err:
        raise CheckpointError(f"{path}: the checkpoint is incomplete ({type(err).__name__}: {err}); delete it to "
                              "resume from an earlier one") from None
    return LoadedCheckpoint(path, manifest, state)


def restore_checkpoint(checkpoint: LoadedCheckpoint, executor: Any, trainer: Any = None,
                       **components: Any) -> LoadedCheckpoint:
    """Put a loaded checkpoint's state back into ``executor`` (parameters, random streams), ``trainer`` and
    the other ``components`` (by the names they were saved under). Refuses a checkpoint of another network,
    naming the first difference, before changing anything."""
    graph = executor.network.graph
    saved = checkpoint.manifest["network"]
    if saved["fingerprint"] != network_fingerprint(graph):
        raise CheckpointError(f"{checkpoint.path}: the checkpoint is of another network ({saved.get('name')!r}): "
                              f"{_difference(saved.get('params', {}), parameter_table(graph))}; resume with the "
                              "network it was saved from, or start afresh")
    for name in [name for name in components if components[name] is not None] + (["trainer"] if trainer else []):
        if name not in checkpoint.state:
            raise CheckpointError(f"{checkpoint.path}: the checkpoint has no {name} state (it holds "
                                  f"{sorted(checkpoint.state)})")
    for name, value in checkpoint.state["network"].items():
        executor.network.feed_tensor(name, value)
    if trainer is not None:
        trainer.load_state_dict(checkpoint.state["trainer"])
    for name, component in components.items():
        if component is not None:
            component.load_state_dict(checkpoint.state[name])
    set_random_state(checkpoint.state["random"], executor)
    return checkpoint


def _difference(saved: Mapping[str, list], current: Mapping[str, list]) -> str:
    missing = [name for name in saved if name not in current]
    extra = [name for name in current if name not in saved]
    changed = [name for name in saved if name in current and saved[name][:2] != current[name][:2]]
    if missing or extra or changed:
        parts = []
        if missing:
            parts.append(f"parameters {missing[:3]} are not in this network")
        if extra:
            parts.append(f"this network's parameters {extra[:3]} are not in the checkpoint")
        if changed:
            name = changed[0]
            parts.append(f"parameter {name!r} is {tuple(saved[name][0])} {saved[name][1]} there, "
                         f"{tuple(current[name][0])} {current[name][1]} here")
        return "; ".join(parts)
    return "the same parameters but a different graph (operators, wiring or attributes)"


def _d5_version() -> str:
    from d5 import __version__

    return __version__


# ---------------------------------------------------------------------- directories of checkpoints
def checkpoints_in(directory: str | os.PathLike) -> list[Path]:
    """The checkpoints in ``directory``, oldest first (by step)."""
    directory = Path(directory)
    if not directory.is_dir():
        return []
    found = [(int(match.group(1)), path) for path in directory.iterdir() if (match := _NAME.match(path.name))]
    return [path for _, path in sorted(found)]


def latest_checkpoint(directory: str | os.PathLike) -> Path | None:
    """The newest checkpoint in ``directory`` (None when there is none)."""
    found = checkpoints_in(directory)
    return found[-1] if found else None


def checkpoint_path(directory: str | os.PathLike, step: int) -> Path:
    return Path(directory) / f"step-{int(step):09d}{SUFFIX}"


def resume(directory: str | os.PathLike, executor: Any, trainer: Any = None, **components: Any) -> int | None:
    """Restore the newest checkpoint in ``directory`` into ``executor``/``trainer``/``components``; the step it
    was saved at, or None when the directory holds none (a fresh start)."""
    path = latest_checkpoint(directory)
    if path is None:
        return None
    return restore_checkpoint(load_checkpoint(path), executor, trainer, **components).step


class Checkpoint(TrainerEvent):
    """Saves the trainer's run into ``directory`` every ``every_steps`` optimizer steps, or at the end of every
    epoch (``every_steps=None``), keeping the newest ``keep_last`` checkpoints; resume with :func:`resume`.

    >>> # trainer = d5.Trainer(train, test, executor, optimizer, events=[Checkpoint("ckpt", every_steps=500)])
    >>> # resume("ckpt", executor, trainer); trainer.run(epochs)   # continues where the last run stopped
    """

    #: After every other event has seen the step or epoch, so their saved states include it.
    hook_order = 100

    def __init__(self, directory: str | os.PathLike, every_steps: int | None = None, keep_last: int = 2) -> None:
        if every_steps is not None and (isinstance(every_steps, bool) or not isinstance(every_steps, int)
                                        or every_steps < 1):
            raise D5Error(f"Checkpoint: every_steps must be a positive int (or None: once per epoch), got "
                          f"{every_steps!r}")
        if isinstance(keep_last, bool) or not isinstance(keep_last, int) or keep_last < 1:
            raise D5Error(f"Checkpoint: keep_last must be a positive int, got {keep_last!r}")
        self.directory = Path(directory)
        self.every_steps = every_steps
        self.keep_last = keep_last
        self.saved: list[Path] = []

    def after_step(self, trainer: Any, step: int, outputs: dict) -> None:
        if self.every_steps is not None and trainer.steps % self.every_steps == 0:
            self.save(trainer)

    def after_epoch(self, trainer: Any, epoch: int, stats: Any) -> None:
        if self.every_steps is None:
            self.save(trainer)

    def save(self, trainer: Any) -> Path:
        """Save now (and drop checkpoints beyond ``keep_last``)."""
        path = save_checkpoint(checkpoint_path(self.directory, trainer.steps), trainer.executor, trainer)
        self.saved.append(path)
        for old in checkpoints_in(self.directory)[:-self.keep_last]:
            old.unlink(missing_ok=True)
        return path


__all__ = ["Checkpoint", "LoadedCheckpoint", "checkpoint_path", "checkpoints_in", "latest_checkpoint",
           "load_checkpoint", "network_fingerprint", "parameter_table", "random_state", "restore_checkpoint",
           "resume", "save_checkpoint", "set_random_state"]

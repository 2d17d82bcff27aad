"""L3: :class:`DataParallel` -- a framework's native optimizer distributed Horovod-style: every rank trains on its
shard of the global batch, and the gradients are averaged over the ranks inside the optimizer's own step.

::

    comm = d5.distributed.MPICommunicationNetwork()
    executor = d5.frameworks.pytorch.from_model(d5.models.resnet(44))
    optimizer = d5.distributed.DataParallel(d5.frameworks.pytorch.MomentumOptimizer(executor, lr=0.1), comm)
    optimizer.step(shard)          # also optimizer.train(...), optimizer.lr = ..., optimizer.state_dict()

One distributed core (this module) and a thin adapter per framework (``d5/frameworks/<fw>/distributed.py``, the
same module name in every framework package, whose ``GradientBuckets`` derives from :class:`BucketReducer`):

* **Buckets** (:class:`BucketLayout`): the trainable parameters in reverse ``get_params()`` order -- roughly the
  order backward produces their gradients -- cut into buckets of at most ``bucket_mb`` MiB (DDP's
  ``bucket_cap_mb``, default 25; a single larger tensor gets a bucket of its own), with one flat, preallocated
  buffer per bucket and dtype. ResNet-44's ~130 gradients then cost a few collectives, not 130 latencies.
* **Overlap** (PyTorch): a post-accumulate-grad hook copies each gradient into its slot (and makes ``param.grad``
  a view of it, DDP's ``gradient_as_bucket_view``: nothing is copied back). When a bucket is complete its
  non-blocking allreduce starts -- always in bucket order, so every rank issues the same collectives in the same
  order -- and later hooks ``Test`` the oldest one in flight: MPICH has no background progress (notes/distributed.md
  section 2), and one ``Test`` runs its progress engine for every request. ``finish()`` (called after the
  divergence check, before clipping: ``NativeOptimizer.gradient_hook``) starts what is left and ``Waitall`` s.
  MPICH's asynchronous progress thread stays off (on 2 cores it made compute 5x slower).
* **Without hooks** (the reference framework) the gradients are copied into the buckets after the pass, each
  bucket starting as soon as it is filled, and the averages are fed back as the gradients the optimizer reads.
* **Compression** (``compression=``, a :func:`~d5.distributed.compression.compression_by_name` string or a
  :class:`~d5.distributed.compression.Compressor`): every bucket goes through
  :func:`~d5.distributed.compression.allreduce_compressed` after the pass (no overlap; error feedback keeps one
  residual per bucket).
* **Start**: at the first step every rank checks that it holds the same parameters and bucket layout as the others
  (a mismatch raises :class:`~d5.errors.DistributedError` on every rank, naming the first differing tensor), then
  takes rank 0's parameter values.

The wrapped optimizer is a framework's native optimizer (:class:`d5.training.native_optimizer.NativeOptimizer`)
or one of d5's framework-neutral ThreeStepOptimizers (``d5.MomentumOptimizer`` -- the reference framework's
optimizers): for those, ``DataParallel.step`` runs the three-step loop with the averaging after the pass. Either way
the ranks end every step with the parameters one process would have after the same step on the concatenated
shards (the loss being a mean over the batch and the shards of one size).

``close()`` (or dropping the wrapper) removes the hooks and the optimizer's ``gradient_hook``: the optimizer then
trains alone again. While wrapped, gradients fetched after a step are views of the buckets: the next step
overwrites them.
"""
from __future__ import annotations

import importlib
import math
import numbers
import weakref
from dataclasses import dataclass
from time import perf_counter
from typing import Any, Mapping, Sequence

import numpy as np

from d5.distributed.communication import CommunicationNetwork, CommunicationRequest
from d5.distributed.compression import Compressor, allreduce_compressed, compression_by_name
from d5.distributed.optimizer import check_same_on_every_rank
from d5.errors import DistributedError
from d5.training.dataset import check_batch
from d5.training.native_optimizer import NativeOptimizer
from d5.training.optimizer import Optimizer, ThreeStepOptimizer

#: DDP's default ``bucket_cap_mb``.
DEFAULT_BUCKET_MB = 25.0
_MIB = 1024 * 1024  # DDP counts its bucket cap in MiB


def bucket_bytes(bucket_mb: Any) -> int:
    """``bucket_mb`` (MiB, a positive finite number) in bytes.

    >>> bucket_bytes(25), bucket_bytes(0.5)
    (26214400, 524288)
    """
    if isinstance(bucket_mb, bool) or not isinstance(bucket_mb, numbers.Real) or not 0 < float(bucket_mb) < math.inf:
        raise DistributedError(f"bucket_mb={bucket_mb!r}: the bucket size is a positive number of MiB (DDP's "
                               f"default {DEFAULT_BUCKET_MB:g}; smaller buckets start communicating earlier)")
    return max(1, int(float(bucket_mb) * _MIB))


@dataclass(frozen=True)
class Slot:
    """Where one parameter's gradient lives: elements ``[offset, offset + size)`` of buffer ``buffer`` (one per
    dtype) of bucket ``bucket``. ``position`` is the parameter's index in ``get_params()``."""

    name: str
    position: int
    bucket: int
    buffer: int
    offset: int
    size: int
    shape: tuple[int, ...]
    dtype: np.dtype


class BucketLayout:
    """The fixed bucket layout of a network's gradients: the parameters in reverse order, cut into buckets of at
    most ``bucket_mb`` MiB (a larger tensor alone in its bucket), one flat buffer per bucket and dtype.

    >>> layout = BucketLayout(["w1", "b1", "w2", "b2"], [(256, 256), (256,), (256, 10), (10,)], ["float32"] * 4,
    ...                       bucket_mb=0.25)
    >>> [[layout.slots[slot].name for slot in bucket] for bucket in layout.buckets]
    [['b2', 'w2', 'b1'], ['w1']]
    >>> layout.buffers[0], layout.slots[0].offset      # bucket 0: one float32 buffer of 10 + 2560 + 256
    ([(dtype('float32'), 2826)], 0)
    """

    def __init__(self, names: Sequence[str], shapes: Sequence[Sequence[int]], dtypes: Sequence[Any],
                 bucket_mb: float = DEFAULT_BUCKET_MB) -> None:
        if not len(names) == len(shapes) == len(dtypes):
            raise DistributedError(f"BucketLayout: {len(names)} names, {len(shapes)} shapes and {len(dtypes)} dtypes")
        self.bucket_mb = float(bucket_mb)
        cap = bucket_bytes(bucket_mb)
        dtypes = [np.dtype(dtype) for dtype in dtypes]
        for name, dtype in zip(names, dtypes):
            if dtype.kind not in "fc":
                raise DistributedError(f"parameter {name!r} has dtype {dtype}: DataParallel averages floating-point "
                                       "gradients only")
        #: Per bucket, the positions of its parameters (reverse get_params() order).
        self.buckets: list[list[int]] = []
        current: list[int] = []
        size = 0
        for position in reversed(range(len(names))):
            nbytes = math.prod(shapes[position]) * dtypes[position].itemsize
            if current and size + nbytes > cap:
                self.buckets.append(current)
                current, size = [], 0
            current.append(position)
            size += nbytes
        if current:
            self.buckets.append(current)
        slots: list[Slot | None] = [None] * len(names)
        #: Per bucket, its buffers as (dtype, elements), in the order the bucket first meets each dtype.
        self.buffers: list[list[tuple[np.dtype, int]]] = []
        for index, positions in enumerate(self.buckets):
            counts: dict[np.dtype, int] = {}
            for position in positions:
                dtype = dtypes[position]
                elements = math.prod(shapes[position])
                offset = counts.setdefault(dtype, 0)
                slots[position] = Slot(names[position], position, index, list(counts).index(dtype), offset,
                                       elements, tuple(int(dim) for dim in shapes[position]), dtype)
                counts[dtype] = offset + elements
            self.buffers.append(list(counts.items()))
        #: Per parameter (get_params() order), its slot.
        self.slots: list[Slot] = slots  # type: ignore[assignment]

    def __len__(self) -> int:
        return len(self.buckets)

    @property
    def nbytes(self) -> int:
        return sum(dtype.itemsize * count for buffers in self.buffers for dtype, count in buffers)

    def signature(self) -> list[str]:
        """One line per parameter (name, shape, dtype, bucket, place), in bucket order: what the ranks compare."""
        return [f"gradient {slot.name}:{slot.shape}:{slot.dtype} in bucket {slot.bucket} at {slot.offset}"
                for bucket in self.buckets for slot in (self.slots[position] for position in bucket)]

    def __repr__(self) -> str:
        return (f"BucketLayout({len(self.slots)} tensors in {len(self.buckets)} buckets of <= {self.bucket_mb:g} MiB, "
                f"{self.nbytes / _MIB:.3g} MiB)")


def resolve_compression(compression: Any, rank: int = 0) -> Compressor | None:
    """``compression=`` as a Compressor, or None for plain averaging (None or ``"none"``). A string is
    :func:`compression_by_name`'s, seeded with ``rank`` (the ranks' rounding errors then average out)."""
    if compression is None or (isinstance(compression, str) and compression.strip().lower() == "none"):
        return None
    if isinstance(compression, str):
        return compression_by_name(compression, seed=rank)
    if isinstance(compression, Compressor):
        return compression
    raise DistributedError(f"compression={compression!r}: pass None, a d5.distributed.Compressor, or a spec string "
                           "such as 'fp16' or 'topk:0.01'")


class BucketReducer:
    """The framework-neutral half of a framework's ``GradientBuckets``: the buffers of a :class:`BucketLayout`,
    their reduction in bucket order, and the time the step waits for it.

    A framework's subclass copies each gradient into :meth:`view` ``(slot)`` and calls :meth:`arrived` (from an
    autograd hook while the backward pass runs, or from :meth:`fill`), and implements:

    ===========================  ==============================================================================
    ``attach()``                 register the hooks, if the framework has any (idempotent)
    ``fill(slots)``              copy the gradients of ``slots`` (no hook brought them) in, calling ``arrived``
    ``write_back(slots)``        make the averages of ``slots`` the gradients the optimizer reads
    ``close()``                  remove the hooks (call ``super().close()``)
    ===========================  ==============================================================================

    A step is :meth:`begin` (arms the hooks), the pass, then :meth:`finish`. ``overlap=False`` starts every
    allreduce in ``finish`` (hooks still copy): the baseline the overlap is measured against. Counters (seconds):
    ``last_wait``/``wait_seconds`` -- blocked in ``finish``'s ``Waitall`` (the exposed communication; with
    compression, the whole compressed exchange); ``last_finish``/``finish_seconds`` -- all of ``finish``;
    ``early_buckets`` -- buckets whose allreduce the hooks started during the backward pass.
    """

    def __init__(self, names: Sequence[str], shapes: Sequence[Sequence[int]], dtypes: Sequence[Any],
                 comm: CommunicationNetwork, bucket_mb: float = DEFAULT_BUCKET_MB, overlap: bool = True,
                 compression: Any = None) -> None:
        if not isinstance(comm, CommunicationNetwork):
            raise DistributedError(f"{type(self).__name__} needs a d5.distributed.CommunicationNetwork (e.g. "
                                   f"MPICommunicationNetwork()), got {type(comm).__name__}")
        self.layout = BucketLayout(names, shapes, dtypes, bucket_mb)
        self.comm = comm
        self.compressor = resolve_compression(compression, comm.rank)
        self.overlap = bool(overlap) and self.compressor is None
        #: Per bucket, its flat buffers (one per dtype).
        self.buffers = [[np.zeros(count, dtype) for dtype, count in buffers] for buffers in self.layout.buffers]
        slots = self.layout.slots
        self._views = [self.buffers[s.bucket][s.buffer][s.offset:s.offset + s.size].reshape(s.shape) for s in slots]
        self._bucket_of = [slot.bucket for slot in slots]
        self._order = [position for bucket in self.layout.buckets for position in bucket]  # bucket by bucket
        self._sizes = [len(bucket) for bucket in self.layout.buckets]
        self._names = [f"gradient bucket {index}" for index in range(len(self.layout))]
        self.armed = False
        self._reset()
        self.steps = 0
        self.last_wait = self.wait_seconds = self.last_finish = self.finish_seconds = 0.0
        self.last_wait_start = 0.0  # perf_counter() when the last Waitall began (one clock for the ranks of a host)
        self.bytes_sent = 0  # payload bytes of the compressed exchanges
        self.early_buckets = 0  # buckets the hooks started during the backward pass, over all steps

    # -- what a framework's subclass implements
    def attach(self) -> None:
        """Register the framework's hooks (none by default)."""

    def fill(self, slots: list[int]) -> None:
        raise NotImplementedError

    def write_back(self, slots: list[int]) -> None:
        raise NotImplementedError

    def close(self) -> None:
        """Remove the hooks; the buckets are not used again."""
        self.armed = False

    # -- the step
    def view(self, slot: int) -> np.ndarray:
        """Parameter ``slot``'s place in its bucket, shaped like the parameter."""
        return self._views[slot]

    def _reset(self) -> None:
        self._filled = bytearray(len(self._bucket_of))
        self._remaining = list(self._sizes)
        self._next = 0  # the next bucket to start: buckets start in order on every rank
        self._pending: list[CommunicationRequest] = []

    def begin(self) -> None:
        """Arm the hooks for one step (they do nothing outside a DataParallel step)."""
        self._reset()
        self.armed = True

    def abandon(self) -> None:
        """A step failed before :meth:`finish`: disarm; the next step starts afresh."""
        self.armed = False
        self._reset()

    def arrived(self, slot: int) -> None:
        """Parameter ``slot``'s gradient is in its place. With overlap, a bucket starts when it and every bucket
        before it are complete, and otherwise the oldest request in flight is tested."""
        bucket = self._bucket_of[slot]
        if self._filled[slot]:
            if bucket < self._next:
                raise DistributedError(f"the gradient of {self.layout.slots[slot].name!r} arrived twice in one step, "
                                       "after its bucket's allreduce had started; DataParallel needs one backward "
                                       "pass per step")
            return
        self._filled[slot] = 1
        remaining = self._remaining
        remaining[bucket] -= 1
        if not self.overlap:
            return
        if remaining[bucket] == 0 and bucket == self._next:
            buckets = len(remaining)
            while self._next < buckets and remaining[self._next] == 0:
                self._start(self._next)
                self._next += 1
        elif self._pending:
            pending = self._pending
            # One Test runs MPICH's progress engine for every request in flight; completed ones leave in order.
            while pending and pending[0].test():
                del pending[0]

    def _start(self, bucket: int) -> None:
        name, comm = self._names[bucket], self.comm
        for buffer in self.buffers[bucket]:
            self._pending.append(comm.iallreduce(buffer, "mean", out=buffer, name=name))

    def finish(self) -> None:
        """After the pass: fill what no hook brought, start the buckets not started, wait for all, and hand the
        averages back (the optimizer's ``gradient_hook``)."""
        if not self.armed:
            raise DistributedError(f"{type(self).__name__}.finish() outside a DataParallel step: the optimizer is "
                                   "wrapped by DataParallel; step the wrapper (or close() it to train alone)")
        started = perf_counter()
        self.early_buckets += self._next  # started by the hooks, during the backward pass
        filled = self._filled
        missing = [slot for slot in self._order if not filled[slot]]  # in bucket order: each starts when filled
        if missing:
            self.fill(missing)
            if not all(self._filled):
                names = [self.layout.slots[slot].name for slot, done in enumerate(self._filled) if not done]
                raise DistributedError(f"{type(self).__name__}.fill left the gradients of {names[:3]} out")
        if self.compressor is not None:
            waited = perf_counter()
            self._reduce_compressed()
        else:
            for bucket in range(self._next, len(self._sizes)):
                self._start(bucket)
            self._next = len(self._sizes)
            waited = perf_counter()
            self.comm.waitall(self._pending)
        done = perf_counter()
        self.armed = False
        self._pending = []
        self.write_back(missing)
        self.steps += 1
        self.last_wait, self.last_wait_start = done - waited, waited
        self.wait_seconds += self.last_wait
        self.last_finish = perf_counter() - started
        self.finish_seconds += self.last_finish

    def _reduce_compressed(self) -> None:
        comm, compressor = self.comm, self.compressor
        scale = 1.0 / comm.size
        for bucket, buffers in enumerate(self.buffers):
            for index, buffer in enumerate(buffers):
                total, sent = allreduce_compressed(comm, buffer, f"{self._names[bucket]}.{index}", compressor)
                np.multiply(total, scale, out=buffer)
                self.bytes_sent += sent

    def stats(self) -> dict[str, Any]:
        """Steps finished, seconds waited in ``Waitall`` and spent in ``finish`` (totals and the last step's),
        the layout, and the compressed payload bytes."""
        return {"steps": self.steps, "wait_seconds": self.wait_seconds, "last_wait": self.last_wait,
                "finish_seconds": self.finish_seconds, "last_finish": self.last_finish,
                "buckets": len(self.layout), "bucket_mb": self.layout.bucket_mb, "overlap": self.overlap,
                "compression": None if self.compressor is None else repr(self.compressor),
                "bytes_sent": self.bytes_sent, "early_buckets": self.early_buckets}

    def reset_stats(self) -> None:
        self.steps = self.bytes_sent = self.early_buckets = 0
        self.last_wait = self.wait_seconds = self.last_finish = self.finish_seconds = 0.0


class PassBuckets(BucketReducer):
    """The buckets of a framework without per-gradient hooks (TensorFlow, MXNet): the gradients of the pass -- the
    network's pass tensors, named by ``trainable()`` -- are copied in after it (``fill``), so nothing overlaps the
    backward pass (``overlap`` is accepted for the common signature and is always off). A framework writes
    :meth:`host_values` (a gradient's values as NumPy) and ``write_back``; ``dtypes`` are the parameters' NumPy
    dtypes."""

    def __init__(self, network: Any, comm: Any, bucket_mb: float, compression: Any, dtypes: Sequence[Any]) -> None:
        names = list(network.get_params())
        gradient_names, params = network.trainable()
        super().__init__(names, [tuple(param.shape) for param in params], dtypes, comm, bucket_mb, False, compression)
        self.network = network
        self.gradient_names = list(gradient_names)

    def host_values(self, grad: Any) -> np.ndarray:
        """A gradient tensor's values as NumPy (a view where the framework allows it: the copy into the bucket is
        then the only one)."""
        raise NotImplementedError

    def fill(self, slots: list[int]) -> None:
        """Copy the gradients of the pass into their slots (all of them: no hook brought any)."""
        passed = self.network._pass
        for slot in slots:
            name = self.gradient_names[slot]
            grad = passed.get(name)
            if grad is None:
                raise DistributedError(f"DataParallel: the pass left no gradient {name!r}; the optimizer's step runs "
                                       "the backward pass before its gradient_hook")
            np.copyto(self.view(slot), self.host_values(grad))
            self.arrived(slot)


def framework_distributed(framework: str) -> Any:
    """``d5.frameworks.<framework>.distributed`` (imported on first use: d5.distributed imports no framework)."""
    from d5 import frameworks

    package = frameworks.get(framework)
    try:
        return importlib.import_module(f"{package.__name__}.distributed")
    except ModuleNotFoundError as err:
        if err.name != f"{package.__name__}.distributed":
            raise
        raise DistributedError(f"the d5 {framework} framework has no distributed.py, so DataParallel cannot bucket "
                               "its gradients; every framework package must provide one (see "
                               "d5/frameworks/reference/distributed.py)") from None


def _release(optimizer: Any, buckets: BucketReducer) -> None:
    """Undo what DataParallel did to the optimizer and the network (no reference to the wrapper itself)."""
    buckets.close()
    if optimizer is not None and vars(optimizer).get("gradient_hook") == buckets.finish:
        del vars(optimizer)["gradient_hook"]  # back to the class's None


class DataParallel(Optimizer):
    """Wraps ``optimizer`` (a framework's native optimizer, or a d5 ThreeStepOptimizer such as the reference
    framework's) so that its step averages the gradients over ``comm``'s ranks (see the module docstring).

    ``bucket_mb``: bucket size in MiB (DDP's default 25); ``compression``: None, a spec string
    (``'fp16'``, ``'topk:0.01'``, ...) or a Compressor; ``overlap``: start each bucket's allreduce during the
    backward pass where the framework has hooks (PyTorch). Collective: every rank wraps the same optimizer on the
    same network. The wrapper is an Optimizer: ``step``, ``train``, ``lr`` and the hyper-parameters (read and set
    through to the optimizer), ``steps``, ``state_dict``/``load_state_dict`` (the optimizer's; equal on every
    rank). ``buckets`` is the framework's ``GradientBuckets`` (``buckets.stats()``: the exposed wait).
    """

    def __init__(self, optimizer: Any, comm: CommunicationNetwork, bucket_mb: float = DEFAULT_BUCKET_MB,
                 compression: Any = None, overlap: bool = True) -> None:
        if isinstance(optimizer, DataParallel):
            raise DistributedError("DataParallel(DataParallel(...)): the optimizer is already distributed")
        if isinstance(optimizer, NativeOptimizer):
            native = True
            if optimizer.gradient_hook is not None:
                raise DistributedError(f"{type(optimizer).__name__} already has a gradient_hook (is it wrapped by "
                                       "another DataParallel? close() that one first)")
        elif isinstance(optimizer, ThreeStepOptimizer):
            native = False
        else:
            raise DistributedError(f"DataParallel wraps a framework's native optimizer (d5.frameworks.<fw>."
                                   f"MomentumOptimizer, ...) or a d5 ThreeStepOptimizer (d5.MomentumOptimizer, ...); "
                                   f"got {type(optimizer).__name__}")
        executor = optimizer.executor
        if executor is None:
            raise DistributedError(f"{type(optimizer).__name__} was created without an executor; pass the "
                                   "GraphExecutor to the optimizer")
        if not isinstance(comm, CommunicationNetwork):
            raise DistributedError(f"DataParallel needs a d5.distributed.CommunicationNetwork (e.g. "
                                   f"MPICommunicationNetwork()), got {type(comm).__name__}")
        framework = getattr(executor, "framework", None)
        if not isinstance(framework, str):
            raise DistributedError(f"DataParallel needs an executor of a d5 framework (d5.frameworks.<fw>.from_model), "
                                   f"got {type(executor).__name__}")
        module = framework_distributed(framework)
        buckets = module.GradientBuckets(executor.network, comm, bucket_mb=bucket_mb, overlap=overlap,
                                         compression=resolve_compression(compression, comm.rank))
        put = object.__setattr__
        put(self, "optimizer", optimizer)
        put(self, "communication", comm)
        put(self, "executor", executor)
        put(self, "network", executor.network)
        put(self, "buckets", buckets)
        put(self, "_native", native)
        put(self, "_synchronized", False)
        put(self, "_closed", False)
        if not native:
            put(self, "_pairs", list(executor.network.gradient(optimizer.loss)))
            put(self, "_prepare", type(optimizer).prepare_param is not ThreeStepOptimizer.prepare_param)
        buckets.attach()
        if native:
            optimizer.gradient_hook = buckets.finish
        # Dropping the wrapper undoes it, as close() does (the finalizer holds no reference to the wrapper).
        put(self, "_finalizer", weakref.finalize(self, _release, optimizer if native else None, buckets))
        self._finalizer.atexit = False

    # -- what the wrapped optimizer holds
    @property
    def base_optimizer(self) -> Any:
        """The wrapped optimizer (the name every DistributedOptimizer gives it)."""
        return self.optimizer

    @property
    def comm(self) -> CommunicationNetwork:
        return self.communication

    @property
    def rank(self) -> int:
        return self.communication.rank

    @property
    def size(self) -> int:
        return self.communication.size

    @property
    def loss(self) -> str:  # type: ignore[override]
        return self.optimizer.loss

    @property
    def check_divergence(self) -> bool:  # type: ignore[override]
        return self.optimizer.check_divergence

    @property
    def steps(self) -> int:  # type: ignore[override]
        return self.optimizer.steps

    @steps.setter
    def steps(self, value: int) -> None:
        self.optimizer.steps = value

    @property
    def lr(self) -> float:  # type: ignore[override]
        return self.optimizer.lr

    @lr.setter
    def lr(self, value: Any) -> None:
        self.optimizer.lr = value

    def hyperparameters(self) -> dict[str, Any]:
        hyperparameters = getattr(self.optimizer, "hyperparameters", None)
        return hyperparameters() if callable(hyperparameters) else {"lr": self.optimizer.lr}

    def __getattr__(self, name: str) -> Any:  # only reached when normal lookup fails: the optimizer's attributes
        optimizer = self.__dict__.get("optimizer")
        if optimizer is None or name.startswith("__"):
            raise AttributeError(f"DataParallel object has no attribute {name!r}")
        return getattr(optimizer, name)

    def __setattr__(self, name: str, value: Any) -> None:
        optimizer = self.__dict__.get("optimizer")
        if (optimizer is not None and name not in self.__dict__ and not hasattr(type(self), name)
                and name in self.hyperparameters()):
            setattr(optimizer, name, value)  # momentum, clip_norm, ...: the optimizer checks and pushes them
        else:
            object.__setattr__(self, name, value)

    def state_dict(self) -> dict[str, Any]:
        """The wrapped optimizer's state (the same on every rank: every rank applies the same update)."""
        return self.optimizer.state_dict()

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.optimizer.load_state_dict(state)

    def __repr__(self) -> str:
        compressor = self.buckets.compressor
        return (f"DataParallel({self.optimizer!r}, ranks={self.size}, bucket_mb={self.buckets.layout.bucket_mb:g}, "
                f"buckets={len(self.buckets.layout)}, overlap={self.buckets.overlap}"
                + (f", compression={compressor!r})" if compressor is not None else ")"))

    # -- the step
    def synchronize(self) -> None:
        """Check that every rank holds the same parameters, bucket layout and compression (DistributedError on
        every rank otherwise, naming the first differing tensor here), then give every rank rank 0's parameter
        values. Collective; the first step calls it."""
        network, comm = self.network, self.communication
        names = list(network.graph.params)
        values = network.fetch_tensors(names)
        items = [f"parameter {name}:{tuple(np.shape(value))}:{np.asarray(value).dtype}"
                 for name, value in zip(names, values)]
        items += self.buckets.layout.signature()
        items.append(f"DataParallel(bucket_mb={self.buckets.layout.bucket_mb:g}, "
                     f"compression={self.buckets.compressor!r})")
        check_same_on_every_rank(comm, items, "parameters and gradient buckets")
        for name, value in zip(names, values):
            network.feed_tensor(name, comm.broadcast(np.ascontiguousarray(value), root=0, name=name))
        object.__setattr__(self, "_synchronized", True)

    def step(self, inputs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        """One training step on this rank's shard; the gradients averaged over the ranks before the update."""
        if self._closed:
            raise DistributedError("DataParallel.step after close(); step the optimizer itself, or wrap it again")
        if not self._synchronized:
            self.synchronize()
        buckets = self.buckets
        buckets.begin()
        try:
            if self._native:
                return self.optimizer.step(inputs)  # its gradient_hook is buckets.finish
            return self._three_step(inputs)
        finally:
            if buckets.armed:  # the step failed before finish(): start the next one afresh
                buckets.abandon()

    def _three_step(self, inputs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        """ThreeStepOptimizer.step with the averaging between the pass and the update rule."""
        optimizer, network = self.optimizer, self.network
        check_batch(inputs, f"DataParallel({type(optimizer).__name__}).step")
        optimizer.new_input()
        if self._prepare:
            for name, _ in self._pairs:
                optimizer.prepare_param(name)
        outputs = self.executor.inference_and_backprop(inputs, optimizer.loss)
        optimizer.finish_step(outputs)  # the divergence check, before any communication
        self.buckets.finish()
        pairs = self._pairs
        values = network.fetch_tensors([name for pair in pairs for name in pair])
        params = {name: values[2 * index] for index, (name, _) in enumerate(pairs)}
        grads = {name: values[2 * index + 1] for index, (name, _) in enumerate(pairs)}
        if optimizer.uses_all_gradients:
            optimizer.prepare_gradients(grads, params)
        for name, _ in pairs:
            network.feed_tensor(name, optimizer.update_rule(grads[name], params[name], name), is_param=True)
        return outputs

    # -- lifetime
    def close(self) -> None:
        """Remove the hooks and the optimizer's gradient_hook (the optimizer trains alone again). Idempotent."""
        object.__setattr__(self, "_closed", True)
        self._finalizer()

    def __enter__(self) -> DataParallel:
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.close()


__all__ = ["DataParallel", "BucketLayout", "BucketReducer", "PassBuckets", "Slot", "DEFAULT_BUCKET_MB", "bucket_bytes",
           "framework_distributed", "resolve_compression"]

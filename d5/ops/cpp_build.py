"""Compiling C++ custom operators at run time, into a per-user cache that every process shares.

:func:`compile_cpp_op` is the entry point (``d5.ops.compile_cpp_op``). A library is built from the user's source
(with ``<d5/custom_operator.h>`` force-included, so the seeds' listing needs no ``#include``), a generated
``PyInit`` stub, and d5's pybind11 module (``custom_operator_module.cpp``), which is compiled once per compiler
and flags and kept as an object file: it holds nearly all of the compile time (~7 s), the user's part takes ~1 s.

The cache (``$D5_CPP_CACHE``, else ``~/.cache/d5/cpp_ops``) is keyed by a hash of everything the binary depends
on: the source, the headers it includes with quotes, d5's headers, the flags and defines, the compiler and its
version, the CPU (``-march=native``), Python's ABI, pybind11's and d5's versions. An entry is a directory holding
the library and a manifest with the library's sha256; it is built in a temporary directory and renamed into
place under a file lock, so concurrent processes (MPI ranks, pytest workers) compile once and a killed compile
leaves nothing a later run would load. An entry whose manifest or checksum does not match is rebuilt.
"""
from __future__ import annotations

import functools
import hashlib
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any, Callable, Mapping, Sequence

from d5.errors import CompileError
from d5.ops.openmp import short_openmp_spin

CACHE_ENV = "D5_CPP_CACHE"
#: Element types an operator can be instantiated for (``dtypes=`` of :func:`compile_cpp_op`).
DTYPES = ("float32", "float64", "int32", "int64")
#: Flags of every custom operator. -funsafe-math-optimizations lets GCC turn ``std::pow(x, 3)`` into
#: ``x*x*x`` (as torch computes ``x ** 3``) and vectorize reductions; unlike -ffast-math it keeps NaN and Inf
#: semantics. ``strict_math=True`` leaves it out.
BASE_FLAGS = ("-std=c++17", "-O3", "-march=native", "-fPIC", "-fvisibility=hidden", "-fopenmp")
FAST_MATH_FLAGS = ("-funsafe-math-optimizations",)
COMPILE_TIMEOUT_SECONDS = 900
LOCK_TIMEOUT_SECONDS = 1800
_MODULE_SOURCE = "custom_operator_module.cpp"
_HEADER = "custom_operator.h"
_REGISTRATION = re.compile(r"\bD5_REGISTER_OP\s*\(\s*([A-Za-z_][\w:]*)\s*\)")
_QUOTE_INCLUDE = re.compile(r'^\s*#\s*include\s*"([^"]+)"', re.MULTILINE)
_COMMENTS = re.compile(r"//[^\n]*|/\*.*?\*/", re.DOTALL)
_IDENTIFIER = re.compile(r"[A-Za-z_]\w*\Z")
_LOADED: dict[str, "CppLibrary"] = {}  # cache key -> library loaded in this process
_COMPILERS: dict[tuple[str, float], "Compiler"] = {}


def include_dir() -> str:
    """The directory to put on the include path for ``#include <d5/custom_operator.h>``.

    >>> (Path(include_dir()) / "d5" / "custom_operator.h").is_file()
    True
    """
    return str(Path(__file__).resolve().parent.parent / "include")


def cache_dir() -> Path:
    """Where compiled operators are kept: ``$D5_CPP_CACHE``, else ``~/.cache/d5/cpp_ops``."""
    configured = os.environ.get(CACHE_ENV)
    return Path(configured).expanduser() if configured else Path("~/.cache/d5/cpp_ops").expanduser()


@dataclass(frozen=True)
class Compiler:
    """A C++ compiler: its resolved path and the first line of its ``--version``."""

    path: str
    version: str


def find_compiler(name: str | None = None) -> Compiler:
    """The C++ compiler to use: ``name``, else ``$CXX``, else the first of c++, g++, clang++ on the PATH.

    >>> find_compiler().version != ""
    True
    """
    candidates = [name] if name else [os.environ["CXX"]] if os.environ.get("CXX") else ["c++", "g++", "clang++"]
    for candidate in candidates:
        found = shutil.which(candidate)
        if found:
            return _describe_compiler(found)
    raise CompileError(f"no C++ compiler found (looked for {', '.join(candidates)} on the PATH): install one "
                       "(Debian: apt install g++) or name it with compile_cpp_op(..., compiler=PATH) or $CXX")


def _describe_compiler(path: str) -> Compiler:
    resolved = os.path.realpath(path)
    memo_key = (resolved, os.path.getmtime(resolved))
    if memo_key not in _COMPILERS:
        try:
            result = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=60)
        except OSError as err:
            raise CompileError(f"the C++ compiler {path} cannot run: {err}") from None
        first_line = (result.stdout or result.stderr).strip().splitlines()
        _COMPILERS[memo_key] = Compiler(resolved, first_line[0] if first_line else "unknown")
    return _COMPILERS[memo_key]


@dataclass
class OpSignature:
    """What a compiled library says about one registered operator."""

    name: str
    num_inputs: int
    num_outputs: int
    has_backward: bool
    takes_context: bool
    has_shape_function: bool
    dtypes: tuple[str, ...]


@dataclass
class CppLibrary:
    """A loaded library of compiled operators (one source file)."""

    module: ModuleType
    path: Path
    key: str
    source_name: str
    flags: tuple[str, ...]
    operators: dict[str, OpSignature] = field(default_factory=dict)
    #: Whether this process compiled it (False: loaded from the cache).
    built: bool = False

    def signature(self, name: str) -> OpSignature:
        """The registered operator ``name`` (the class template's name, with or without its namespace)."""
        for registered, signature in self.operators.items():
            if name in (registered, registered.rsplit("::", 1)[-1]):
                return signature
        names = ", ".join(sorted(self.operators)) or "none"
        raise CompileError(f"{self.source_name} registers no operator {name!r} (it registers: {names}); name the "
                           f"class template given to D5_REGISTER_OP")


def compile_cpp_op(source_or_path: str | os.PathLike, name: str, defines: Mapping[str, Any] | None = None, *,
                   attributes: Mapping[str, Any] | None = None,
                   output_shapes: Callable[..., Sequence[Sequence[int]]] | None = None,
                   dtypes: Sequence[str] = ("float32", "float64"), extra_compile_args: Sequence[str] = (),
                   include_dirs: Sequence[str | os.PathLike] = (), strict_math: bool = False,
                   compiler: str | None = None, verbose: bool = False):
    """Compile the C++ operator ``name`` (a class template registered with ``D5_REGISTER_OP``) from a source
    file or a string, and return it as a :class:`d5.ops.cpp_op.CppOp` -- a d5 CustomOp that runs in every
    framework (``d5.frameworks.<name>.custom_op(op)``). See ``<d5/custom_operator.h>`` for the C++ side.

    ``defines`` become ``-DNAME=VALUE``; ``attributes`` reach a constructor taking ``const d5::OpContext&``;
    ``output_shapes(input_shapes, attributes) -> [shape, ...]`` overrides the C++ shape function (default:
    every output has input 0's shape). A later call with the same inputs loads the cached build (milliseconds).
    Raises :class:`d5.errors.CompileError` with the compiler's message and the offending lines.

    >>> import numpy as np
    >>> source = '''
    ... template <typename T> struct twice {
    ...     long n; twice(long n) : n(n) {}
    ...     void forward(const T* x, T* y) { for (long i = 0; i < n; ++i) y[i] = 2 * x[i]; }
    ...     void backward(const T* gy, const T*, const T*, T* gx) { for (long i = 0; i < n; ++i) gx[i] = 2 * gy[i]; }
    ... };
    ... D5_REGISTER_OP(twice)
    ... '''
    >>> op = compile_cpp_op(source, "twice")
    >>> op.forward([np.array([1.0, 2.0])])
    array([2., 4.])
    """
    from d5.ops.cpp_op import CppOp

    library = load_library(source_or_path, defines=defines, dtypes=dtypes, extra_compile_args=extra_compile_args,
                           include_dirs=include_dirs, strict_math=strict_math, compiler=compiler, verbose=verbose)
    if not isinstance(name, str) or not name:
        raise CompileError(f"compile_cpp_op: name must be the registered class template's name, got {name!r}")
    return CppOp(library, library.signature(name).name, attributes=attributes, output_shapes=output_shapes)


def load_library(source_or_path: str | os.PathLike, *, defines: Mapping[str, Any] | None = None,
                 dtypes: Sequence[str] = ("float32", "float64"), extra_compile_args: Sequence[str] = (),
                 include_dirs: Sequence[str | os.PathLike] = (), strict_math: bool = False,
                 compiler: str | None = None, verbose: bool = False) -> CppLibrary:
    """The compiled library of a C++ source (built, or taken from the cache): see :func:`compile_cpp_op`."""
    text, path, display = _read_source(source_or_path)
    _check_registration(text, display)
    tool = find_compiler(compiler)
    includes = [str(Path(d).resolve()) for d in include_dirs]
    flags = (*BASE_FLAGS, *(() if strict_math else FAST_MATH_FLAGS), *_dtype_flags(dtypes),
             *_define_flags(defines), *map(str, extra_compile_args))
    key = _hash({"source": text, "headers": _quoted_headers(text, path, includes), "flags": flags,
                 "includes": includes, **_toolchain(tool, flags)})
    if key in _LOADED:
        return _LOADED[key]
    root = cache_dir()
    entry = root / f"{_slug(display)}-{key[:20]}"
    library = _load_entry(entry, key, display, flags)
    if library is None:
        from filelock import FileLock, Timeout

        root.mkdir(parents=True, exist_ok=True)
        try:
            with FileLock(str(entry) + ".lock", timeout=LOCK_TIMEOUT_SECONDS):
                library = _load_entry(entry, key, display, flags)  # another process may have built it meanwhile
                if library is None:
                    runtime = _runtime_object(root, tool, flags, verbose)
                    _build_entry(entry, key, text, path, display, tool, flags, includes, runtime, verbose)
                    library = _load_entry(entry, key, display, flags)
                    if library is not None:
                        library.built = True
        except Timeout:
            raise CompileError(f"waited {LOCK_TIMEOUT_SECONDS} s for another process compiling {display} "
                               f"(lock {entry}.lock); if none is running, delete the lock file") from None
        if library is None:
            raise CompileError(f"the library built from {display} in {entry} cannot be loaded")
    _LOADED[key] = library
    return library


def _read_source(source: Any) -> tuple[str, Path | None, str]:
    looks_like_path = isinstance(source, os.PathLike) or (
        isinstance(source, str) and "\n" not in source and "{" not in source and source.strip() != "")
    if looks_like_path:
        path = Path(source).expanduser()
        if not path.is_file():
            raise CompileError(f"C++ source file {str(path)!r} does not exist (compile_cpp_op takes a path to a "
                               "file or the source code itself as a string)")
        try:
            return path.read_text(encoding="utf-8"), path.resolve(), str(path)
        except (OSError, UnicodeDecodeError) as err:
            raise CompileError(f"cannot read C++ source {str(path)!r}: {err}") from None
    if isinstance(source, str):
        return source, None, "<string>"
    raise CompileError(f"compile_cpp_op expects a path or C++ source code (str), got {type(source).__name__}")


def _check_registration(text: str, display: str) -> None:
    if not _REGISTRATION.search(_COMMENTS.sub("", text)):
        raise CompileError(f"{display} registers no operator: add the line `D5_REGISTER_OP(classname)` after the "
                           "class template (at namespace scope), naming it")


def _dtype_flags(dtypes: Sequence[str]) -> list[str]:
    if isinstance(dtypes, str) or not dtypes or any(d not in DTYPES for d in dtypes):
        raise CompileError(f"dtypes must be a non-empty list of {', '.join(DTYPES)}; got {dtypes!r}")
    return [f"-DD5_OP_{d.upper()}={int(d in dtypes)}" for d in DTYPES]


def _define_flags(defines: Mapping[str, Any] | None) -> list[str]:
    if defines is None:
        return []
    if not isinstance(defines, Mapping):
        raise CompileError(f"defines must be a mapping such as {{'DPOWER': 3}}, got {type(defines).__name__}")
    flags = []
    for name, value in sorted(defines.items()):
        if not isinstance(name, str) or not _IDENTIFIER.match(name):
            raise CompileError(f"define {name!r} is not a C identifier")
        if isinstance(value, bool):
            value = int(value)
        if value is None:
            flags.append(f"-D{name}")
        elif isinstance(value, (int, float, str)) and "\n" not in str(value):
            flags.append(f"-D{name}={value}")
        else:
            raise CompileError(f"define {name}: the value must be a number or a one-line string, got {value!r}")
    return flags


def _quoted_headers(text: str, path: Path | None, include_dirs: Sequence[str]) -> dict[str, str]:
    """sha256 of every header reached through ``#include "..."`` (searched like the compiler does), so that
    editing one rebuilds. Angle-bracket headers are the system's and pybind11's, covered by their versions."""
    found: dict[str, str] = {}
    pending = [(text, path.parent if path else None)]
    while pending:
        content, directory = pending.pop()
        for name in _QUOTE_INCLUDE.findall(content):
            for base in ([directory] if directory else []) + [Path(d) for d in include_dirs]:
                candidate = (base / name).resolve()
                if candidate.is_file() and str(candidate) not in found:
                    data = candidate.read_bytes()
                    found[str(candidate)] = hashlib.sha256(data).hexdigest()
                    pending.append((data.decode("utf-8", "replace"), candidate.parent))
                    break
    return found


def _toolchain(tool: Compiler, flags: Sequence[str]) -> dict[str, Any]:
    """What a build depends on besides the user's files: d5's sources, the compiler, Python, the CPU."""
    import pybind11

    from d5 import __version__

    here = Path(include_dir()) / "d5"
    return {"d5": __version__, "header": _file_hash(here / _HEADER), "module": _file_hash(here / _MODULE_SOURCE),
            "compiler": [tool.path, tool.version], "python": [sys.version, sysconfig.get_config_var("EXT_SUFFIX")],
            "pybind11": pybind11.__version__, "cpu": _cpu_identity() if "-march=native" in flags else ""}


@functools.lru_cache(maxsize=None)
def _cpu_identity() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as cpuinfo:
            lines = [line for line in cpuinfo if line.startswith(("model name", "flags"))]
        return "|".join(sorted(set(lines)))
    except OSError:
        import platform

        return platform.processor() or platform.machine()


def _file_hash(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _hash(payload: Mapping[str, Any]) -> str:
    return hashlib.sha256(json.dumps(payload, sort_keys=True, default=str).encode()).hexdigest()


def _slug(display: str) -> str:
    return re.sub(r"\W", "_", Path(display).stem if display != "<string>" else "source")[:40]


def _module_name(key: str) -> str:
    return f"d5op_{key[:32]}"


def _library_file(directory: Path) -> Path:
    return directory / ("d5op" + sysconfig.get_config_var("EXT_SUFFIX"))


def _load_entry(entry: Path, key: str, display: str, flags: Sequence[str]) -> CppLibrary | None:
    """The cached library, or None when absent or not exactly what ``key`` names (then it is rebuilt)."""
    try:
        manifest = json.loads((entry / "manifest.json").read_text(encoding="utf-8"))
        library_file = _library_file(entry)
        if manifest.get("key") != key or manifest.get("sha256") != _file_hash(library_file):
            return None
        spec = importlib.util.spec_from_file_location(_module_name(key), library_file)
        with short_openmp_spin():  # the same libgomp setting as d5._C, whichever loads libgomp first
            module = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
        operators = {info["name"]: OpSignature(**{**info, "dtypes": tuple(info["dtypes"])})
                     for info in module.operators()}
    except (OSError, ValueError, ImportError, KeyError, TypeError, AttributeError):
        return None
    return CppLibrary(module, library_file, key, display, tuple(flags), operators)


def _runtime_object(root: Path, tool: Compiler, flags: Sequence[str], verbose: bool) -> Path:
    """d5's pybind11 module compiled to an object file, once per toolchain and flags."""
    import pybind11

    base = [f for f in flags if f in BASE_FLAGS or f in FAST_MATH_FLAGS]
    directory = root / f"runtime-{_hash({'flags': base, **_toolchain(tool, base)})[:20]}"
    target = directory / "custom_operator_module.o"
    if target.is_file():
        return target
    with tempfile.TemporaryDirectory(prefix=".runtime-", dir=root) as tmp:
        output = Path(tmp) / target.name
        command = [tool.path, *base, "-I", include_dir(), "-I", pybind11.get_include(),
                   "-I", sysconfig.get_paths()["include"], "-c", str(Path(include_dir()) / "d5" / _MODULE_SOURCE),
                   "-o", str(output)]
        _run_compiler(command, "d5's operator module", None, verbose)
        directory.mkdir(exist_ok=True)
        os.replace(output, target)  # atomic: a killed build leaves no partial object here
    return target


def _build_entry(entry: Path, key: str, text: str, path: Path | None, display: str, tool: Compiler,
                 flags: Sequence[str], includes: Sequence[str], runtime: Path, verbose: bool) -> None:
    with tempfile.TemporaryDirectory(prefix=".build-", dir=entry.parent) as tmp:
        build = Path(tmp) / "library"
        build.mkdir()
        source = path if path is not None else build / "source.cpp"
        if path is None:
            source.write_text(text, encoding="utf-8")
        # The library's own PyInit, force-included after d5's header (the user's line numbers stay theirs).
        stub = build / "d5_module_init.h"
        stub.write_text('extern "C" void* PyInit_d5_cpp_op();\n'
                        f'extern "C" __attribute__((visibility("default"))) void* PyInit_{_module_name(key)}() '
                        "{ return PyInit_d5_cpp_op(); }\n", encoding="utf-8")
        library_file, objects = _library_file(build), build / "operator.o"
        command = [tool.path, *flags, "-I", include_dir(), *[f"-I{d}" for d in includes], "-include",
                   "d5/custom_operator.h", "-include", str(stub), "-c", str(source), "-o", str(objects)]
        # Linked without the fast-math flags: with them GCC links crtfastmath.o, whose constructor turns on
        # flush-to-zero for the whole process (numpy's and torch's arithmetic included) when the library loads.
        link = [tool.path, *[f for f in BASE_FLAGS if f != "-fvisibility=hidden"], "-shared", str(objects),
                str(runtime), "-o", str(library_file)]
        started = time.perf_counter()
        _run_compiler(command, display, (source, text), verbose)
        _run_compiler(link, display, None, verbose)
        manifest = {"key": key, "sha256": _file_hash(library_file), "source": display, "command": command, "link": link,
                    "compiler": [tool.path, tool.version], "seconds": round(time.perf_counter() - started, 3)}
        (build / "manifest.json").write_text(json.dumps(manifest, indent=1), encoding="utf-8")
        if entry.exists():  # an entry that failed its check: moved aside first, since a rename cannot replace it
            stale = Path(tempfile.mkdtemp(prefix=".stale-", dir=entry.parent))
            os.replace(entry, stale / "entry")
            shutil.rmtree(stale, ignore_errors=True)
        os.replace(build, entry)


def _run_compiler(command: list[str], display: str, source: tuple[Path, str] | None, verbose: bool) -> None:
    if verbose:
        print("d5: " + " ".join(command), file=sys.stderr)
    try:
        # LC_ALL=C: plain ASCII quotes and English messages, whatever the user's locale.
        result = subprocess.run(command, capture_output=True, text=True, timeout=COMPILE_TIMEOUT_SECONDS,
                                env={**os.environ, "LC_ALL": "C", "LANG": "C"})
    except FileNotFoundError:
        raise CompileError(f"the C++ compiler {command[0]} is missing: install one (Debian: apt install g++) or "
                           "set $CXX") from None
    except subprocess.TimeoutExpired:
        raise CompileError(f"compiling {display} took over {COMPILE_TIMEOUT_SECONDS} s and was stopped") from None
    if result.returncode != 0:
        from d5.ops.cpp_errors import compile_error

        raise compile_error(display, command, result.stdout + result.stderr, source)

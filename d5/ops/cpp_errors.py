"""Compiler failures as :class:`d5.errors.CompileError`: the compiler's own words, then the lines they point at.

>>> err = compile_error("<string>", ["c++"], "/tmp/x/source.cpp:2:5: error: expected ';'\\n",
...                     (Path("/tmp/x/source.cpp"), "int a\\nint b\\n"))
>>> print(err.source_lines)
<string>:2:5: error: expected ';'
      1 | int a
  >   2 | int b
"""
from __future__ import annotations

import re
from pathlib import Path

from d5.errors import CompileError

_DIAGNOSTIC = re.compile(r"^(?P<file>[^:\n]+):(?P<line>\d+):(?:(?P<column>\d+):)?\s*(?:fatal )?error:\s*(?P<what>.*)$",
                         re.MULTILINE)
MAX_OUTPUT_LINES = 60
MAX_EXCERPTS = 5
CONTEXT_LINES = 1


def compile_error(display: str, command: list[str], output: str, source: tuple[Path, str] | None) -> CompileError:
    """A CompileError for a failed compiler run over ``source`` (its path and text; None for d5's own files):
    the message names the source, quotes the first errors with the source lines around each (numbered, the
    offending one marked), and ends with the compiler's output (cut to :data:`MAX_OUTPUT_LINES` lines).
    ``.compiler_output`` holds all of it, ``.source_lines`` the excerpts, ``.command`` the command line."""
    excerpts = _excerpts(output, source, display)
    lines = output.strip().splitlines()
    shown = lines if len(lines) <= MAX_OUTPUT_LINES else lines[:MAX_OUTPUT_LINES] + [
        f"... ({len(lines) - MAX_OUTPUT_LINES} more lines in CompileError.compiler_output)"]
    first = next((m.group("what") for m in _DIAGNOSTIC.finditer(output)), lines[-1] if lines else "no output")
    message = f"compiling {display} failed: {first}"
    if excerpts:
        message += "\n\n" + excerpts
    message += "\n\ncompiler output:\n" + "\n".join(shown)
    error = CompileError(message)
    error.compiler_output, error.source_lines, error.command = output, excerpts, list(command)
    return error


def _excerpts(output: str, source: tuple[Path, str] | None, display: str) -> str:
    if source is None:
        return ""
    path, text = source
    source_lines = text.splitlines()
    blocks, seen = [], set()
    for match in _DIAGNOSTIC.finditer(output):
        if not _same_file(match.group("file"), path) or len(blocks) >= MAX_EXCERPTS:
            continue
        number = int(match.group("line"))
        if number in seen or not 1 <= number <= len(source_lines):
            continue
        seen.add(number)
        column = f":{match.group('column')}" if match.group("column") else ""
        block = [f"{display}:{number}{column}: error: {match.group('what')}"]
        for n in range(max(1, number - CONTEXT_LINES), min(len(source_lines), number + CONTEXT_LINES) + 1):
            block.append(f"  {'>' if n == number else ' '} {n:>3} | {source_lines[n - 1]}")
        blocks.append("\n".join(block))
    return "\n\n".join(blocks)


def _same_file(reported: str, path: Path) -> bool:
    try:
        return Path(reported).resolve() == path.resolve()
    except OSError:
        return False

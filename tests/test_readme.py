"""README.md's code runs as written.

**Python blocks** (```` ```python ````): each block is a self-contained program, as a reader copies it. It runs
alone, top to bottom, in a fresh interpreter (``sys.executable``) with nothing from the blocks before it, so a
block has its own imports and builds its own data (small models, synthetic arrays or offline data such as
scikit-learn's digits; nothing downloads). The working directory is a fresh temporary directory, so the files
a block writes land there; it links the checkout's ``examples/`` and ``recipes/``, so a block reads paths
relative to the checkout's root as a reader running it there would. A block fails the test when it exits with
a non-zero status or runs longer than ``TIMEOUT_S``; the failure names the block's README line and shows the
error. The script a block runs from is padded with blank lines so that its line numbers are the README's: a
traceback's ``line N`` is README.md's line N.

An HTML comment on the line before a block (blank lines between are allowed), ``<!-- skip-test: REASON -->``,
makes this test skip the block and report REASON. It is only for a block that needs what a test machine may
lack (a GPU), never for one that is merely slow or wrong.

**Shell blocks** (```` ```sh ````, ``bash``, ``shell``, ``console``) are not run (they train for minutes); every
command in them is checked to exist as written: ``make TARGET`` names a target of the Makefile; ``d5 ...``
parses with d5's own command-line parser, a recipe it names exists, the overrides it passes to a recipe are
flags a recipe takes and a sweep grid is valid; ``python PATH ...`` names a file of the checkout (a recipe's
flags are checked as above); ``python -m MODULE ...`` names an importable module.
"""
from __future__ import annotations

import argparse
import importlib.util
import os
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
#: Checkout directories a block may read by relative path (linked into its working directory).
LINKED = ("examples", "recipes")
#: Seconds one block may run (each takes a few seconds; this leaves room for a loaded machine).
TIMEOUT_S = 180
SHELL_LANGUAGES = {"sh", "bash", "shell", "console"}
_FENCE = re.compile(r"^```\s*([\w+-]*)\s*$")
_SKIP = re.compile(r"^<!--\s*skip-test:\s*(.*?)\s*-->$")


@dataclass(frozen=True)
class Block:
    language: str
    line: int  # README line of the block's first line of code (1-based)
    code: str
    skip: str | None  # the reason of a <!-- skip-test: ... --> comment before the block

    def __str__(self) -> str:
        return f"README.md:{self.line}"


def readme_blocks(text: str) -> list[Block]:
    """The fenced code blocks of ``text``, in order."""
    lines = text.split("\n")
    blocks: list[Block] = []
    index = 0
    while index < len(lines):
        match = _FENCE.match(lines[index])
        if not match:
            index += 1
            continue
        end = index + 1
        while end < len(lines) and lines[end].strip() != "```":
            end += 1
        if end == len(lines):
            raise AssertionError(f"README.md line {index + 1}: a code block that is never closed")
        before = index - 1
        while before >= 0 and not lines[before].strip():
            before -= 1
        skip = _SKIP.match(lines[before].strip()) if before >= 0 else None
        blocks.append(Block(match.group(1).lower(), index + 2, "\n".join(lines[index + 1:end]) + "\n",
                            skip.group(1) if skip else None))
        index = end + 1
    return blocks


BLOCKS = readme_blocks(README.read_text(encoding="utf-8"))
PYTHON_BLOCKS = [block for block in BLOCKS if block.language in ("python", "py")]
SHELL_BLOCKS = [block for block in BLOCKS if block.language in SHELL_LANGUAGES]


def test_readme_has_blocks():
    assert PYTHON_BLOCKS and SHELL_BLOCKS, "README.md has no ```python or no ```sh blocks: is the parser broken?"
    unknown = [f"line {block.line}: ```{block.language}" for block in BLOCKS
               if block.language not in ("python", "py", *SHELL_LANGUAGES)]
    assert not unknown, f"README.md has code blocks this test neither runs nor checks: {unknown}"


def _tail(text: str, lines: int = 40) -> str:
    return "\n".join(text.rstrip().splitlines()[-lines:])


@pytest.mark.parametrize("block", PYTHON_BLOCKS, ids=str)
def test_python_block_runs(block: Block, tmp_path: Path):
    if block.skip is not None:
        pytest.skip(f"README.md line {block.line}: {block.skip}")
    for name in LINKED:
        (tmp_path / name).symlink_to(ROOT / name, target_is_directory=True)
    script = tmp_path / f"README_md_line_{block.line}.py"
    script.write_text("\n" * (block.line - 1) + block.code, encoding="utf-8")  # README's line numbers
    env = dict(os.environ, MPLBACKEND="Agg",
               PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
    try:
        result = subprocess.run([sys.executable, str(script)], cwd=tmp_path, env=env, capture_output=True,
                                text=True, timeout=TIMEOUT_S)
    except subprocess.TimeoutExpired as timeout:
        stderr = timeout.stderr or b""  # bytes even with text=True
        pytest.fail(f"README.md line {block.line}: the ```python block ran longer than {TIMEOUT_S} s\n"
                    f"{_tail(stderr.decode(errors='replace') if isinstance(stderr, bytes) else stderr)}",
                    pytrace=False)
    if result.returncode != 0:
        pytest.fail(f"README.md line {block.line}: the ```python block exited with status {result.returncode} "
                    f"(traceback line numbers are README.md's)\n--- stdout (end)\n{_tail(result.stdout, 15)}\n"
                    f"--- stderr (end)\n{_tail(result.stderr)}", pytrace=False)


# ------------------------------------------------------------------------------------------- shell blocks

def _commands(block: Block) -> list[tuple[int, list[str]]]:
    """(README line, argv) of every command of a shell block, comments, prompts and ``VAR=value`` dropped."""
    commands = []
    for offset, line in enumerate(block.code.splitlines()):
        words = shlex.split(line.strip().removeprefix("$ "), comments=True)
        while words and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*=.*", words[0]):
            words.pop(0)
        if words:
            commands.append((block.line + offset, words))
    return commands


def _make_targets() -> set[str]:
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    return {target for match in re.finditer(r"^([^\s:=#][^:=#]*?)\s*:(?!=)", makefile, re.MULTILINE)
            for target in match.group(1).split()}


def _check_recipe_flags(overrides: list[str], where: str) -> None:
    from d5.recipe_args import build_parser

    try:
        _, unknown = build_parser().parse_known_args(overrides)
    except (argparse.ArgumentError, SystemExit) as err:
        pytest.fail(f"{where}: the recipe flags {overrides} do not parse: {err}", pytrace=False)
    assert not unknown, f"{where}: a recipe does not take {unknown}"


def _check_d5(args: list[str], where: str) -> None:
    from d5.cli import build_parser
    from d5.errors import D5Error
    from d5.recipe_record import find_recipe
    from d5.sweep import parse_grid

    try:
        parsed = build_parser().parse_args(args)
    except SystemExit:
        pytest.fail(f"{where}: `d5 {' '.join(args)}` does not parse (see the usage above)", pytrace=False)
    try:
        if parsed.command in ("run", "recipe"):
            if parsed.recipe is not None:
                find_recipe(parsed.recipe)
            _check_recipe_flags(list(parsed.overrides), where)
        elif parsed.command == "sweep":
            find_recipe(parsed.recipe)
            parse_grid(parsed.grid or [])
    except D5Error as err:
        pytest.fail(f"{where}: `d5 {' '.join(args)}`: {err}", pytrace=False)


def _check_python(args: list[str], where: str) -> None:
    if args[0] == "-m":
        assert importlib.util.find_spec(args[1]) is not None, f"{where}: no module {args[1]!r}"
        return
    path = ROOT / args[0]
    assert path.is_file(), f"{where}: no file {args[0]!r} in the checkout"
    if path.parent == ROOT / "recipes":
        _check_recipe_flags(args[1:], where)


@pytest.mark.parametrize("block", SHELL_BLOCKS, ids=str)
def test_shell_block_commands_exist(block: Block, monkeypatch):
    monkeypatch.chdir(ROOT)  # README's commands run from the checkout's root
    commands = _commands(block)
    assert commands, f"README.md line {block.line}: an empty shell block"
    for line, (program, *args) in commands:
        where = f"README.md line {line}"
        if program == "make":
            missing = [target for target in args if not target.startswith("-") and "=" not in target
                       and target not in _make_targets()]
            assert not missing, f"{where}: the Makefile has no target {missing}"
        elif program == "d5":
            _check_d5(args, where)
        elif program in ("python", "python3"):
            _check_python(args, where)
        else:
            pytest.fail(f"{where}: this test does not know how to check `{program}`; teach it", pytrace=False)


def test_skip_marker_and_line_numbers():
    """The parser: a skip comment applies to the next block only, and a block's line is its first code line."""
    text = "intro\n\n<!-- skip-test: needs a GPU -->\n\n```python\nx = 1\n```\n\n```sh\nmake test\n```\n"
    python, shell = readme_blocks(text)
    assert (python.language, python.line, python.code, python.skip) == ("python", 6, "x = 1\n", "needs a GPU")
    assert (shell.language, shell.line, shell.skip) == ("sh", 10, None)
    assert _commands(shell) == [(10, ["make", "test"])]

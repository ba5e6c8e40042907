"""The commands shown in README.md and docs/*.md run as written, as far as their words go: every `--flag` a command
names is one its entry point's parser accepts, and every `make` target named is in the Makefile.

A command is a line of a fenced code block (python blocks aside), with backslash-newline continuations joined,
`# comments` dropped, leading `VAR=value` environment assignments skipped, that runs
- `python -m pipeline.<module>` (any python: `.venv/bin/python`, `python3`, ...) or the `hardpos` console script:
  pipeline.run's flags are the hardpos flags and Beam's own (every PipelineOptions class, the Dask runner's
  included), plus --help, -h and --help_beam; pipeline.train.* and pipeline.checks.* are read from their argparse
  parsers, built without running anything;
- `python benchmarks/<script>.py`: the flags its `add_argument` calls name (read from its source, not run);
- `make <target> ...`: each target must be a rule of the Makefile.
Placeholders (`PATH`, `ORG/NAME`, `...`) and optional brackets (`[--seed=S]`) are fine: only flag names are checked.
"""
from __future__ import annotations

import argparse
import ast
import importlib
import re
from functools import cache

import pytest
from conftest import REPO

DOC_FILES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
FENCE = re.compile(r"^```([\w+-]*)[^\n]*\n(.*?)^```", re.S | re.M)
FLAG = re.compile(r"(?<![\w-])(--?[A-Za-z][\w-]*)")
ENV = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=\S*$")
PYTHON = re.compile(r"^(?:\S*/)?python(?:3(?:\.\d+)?)?$")


# ---------------------------------------------------------------------------------------------------------------
# extraction


def code_blocks(text: str):
    """(language, body) of every fenced block."""
    for lang, body in FENCE.findall(text):
        yield lang.lower(), body


def command_lines(body: str) -> list[str]:
    """The block's commands: continuations joined, comments dropped, blank lines skipped."""
    lines = []
    for line in body.replace("\\\n", " ").splitlines():
        line = re.sub(r"(^|\s)#.*$", "", line).strip()
        if line:
            lines.append(line)
    return lines


def parse_command(line: str) -> tuple[str, list[str]] | None:
    """(entry point, its words) for a command this test checks, else None. The entry point is a module
    (pipeline.run, pipeline.train.finetune, ...), a benchmark script path, or "make"."""
    words = line.split()
    while words and ENV.match(words[0]):
        words = words[1:]
    if not words:
        return None
    head = words[0]
    if PYTHON.match(head) and len(words) > 2 and words[1] == "-m" and words[2].startswith("pipeline."):
        return words[2], words[3:]
    if PYTHON.match(head) and len(words) > 1 and re.match(r"^benchmarks/[\w-]+\.py$", words[1]):
        return words[1], words[2:]
    if re.match(r"^benchmarks/[\w-]+\.py$", head):
        return head, words[1:]
    if re.match(r"^(?:\S*/)?hardpos$", head):
        return "pipeline.run", words[1:]
    if head == "make":
        return "make", words[1:]
    return None


def flags_of(words: list[str]) -> list[str]:
    """The flag names among a command's words (`--x=1`, `[--x=N]`, `--x VALUE`, `-h`)."""
    found = []
    for word in words:
        word = word.strip("[]()\"'")
        match = FLAG.match(word)
        if match and not re.match(r"^-\d", word):
            found.append(match.group(1))
    return found


def doc_commands(text: str) -> list[tuple[str, list[str], str]]:
    """(entry point, words, the line) of every checked command in a markdown text: the lines of its fenced blocks,
    then the inline code spans of its prose that are whole commands (`python -m pipeline.train.patching ...`)."""
    out = []
    for lang, body in code_blocks(text):
        if lang in ("python", "py", "json", "yaml"):
            continue
        for line in command_lines(body):
            parsed = parse_command(line)
            if parsed:
                out.append((*parsed, line))
    prose = FENCE.sub("", text)
    for span in re.findall(r"`([^`]+)`", prose):
        line = " ".join(span.split())
        parsed = parse_command(line)
        if parsed:
            out.append((*parsed, line))
    return out


# ---------------------------------------------------------------------------------------------------------------
# what each entry point accepts


class _Captured(Exception):
    pass


def _captured_parser(call) -> argparse.ArgumentParser:
    """The parser a function builds and parses with, caught at its parse_args: nothing after it runs."""
    original = argparse.ArgumentParser.parse_args

    def grab(self, *args, **kwargs):
        raise _Captured(self)

    argparse.ArgumentParser.parse_args = grab
    try:
        call()
    except _Captured as caught:
        return caught.args[0]
    finally:
        argparse.ArgumentParser.parse_args = original
    raise AssertionError(f"{call} never parsed its arguments")


def _option_strings(parser: argparse.ArgumentParser) -> set[str]:
    return {s for action in parser._actions for s in action.option_strings}


@cache
def known_flags(entry: str) -> frozenset[str]:
    if entry == "pipeline.run":
        from pipeline import options

        importlib.import_module("pipeline.runners.dask_runner")  # DaskOptions: --dask_client_address, ...
        return frozenset(_option_strings(options._all_options_parser()) | {"-h", "--help", "--help_beam"})
    if entry.startswith("benchmarks/"):
        tree = ast.parse((REPO / entry).read_text(encoding="utf-8"))
        names = {"-h", "--help"}
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "add_argument":
                names |= {a.value for a in node.args if isinstance(a, ast.Constant) and isinstance(a.value, str)
                          and a.value.startswith("-")}
        return frozenset(names)
    module = importlib.import_module(entry)
    if hasattr(module, "build_parser"):
        parser = module.build_parser()
    elif hasattr(module, "parse_args"):
        parser = _captured_parser(lambda: module.parse_args([]))
    else:
        parser = _captured_parser(lambda: module.main([]))
    return frozenset(_option_strings(parser))


@cache
def make_targets() -> frozenset[str]:
    text = (REPO / "Makefile").read_text(encoding="utf-8")
    return frozenset(re.findall(r"(?m)^([A-Za-z0-9_.-]+)\s*:(?!=)", text))


def problems(commands) -> list[str]:
    """One line per unknown entry point, flag or make target."""
    out = []
    for entry, words, line in commands:
        if entry == "make":
            for target in (w for w in words if not w.startswith("-") and "=" not in w):
                if target not in make_targets():
                    out.append(f"make target {target!r} is not in the Makefile: {line}")
            continue
        if entry.startswith("benchmarks/") and not (REPO / entry).is_file():
            out.append(f"no such script {entry}: {line}")
            continue
        try:
            known = known_flags(entry)
        except ModuleNotFoundError as e:
            out.append(f"no such module {entry} ({e}): {line}")
            continue
        out += [f"{entry}: unknown flag {flag}: {line}" for flag in flags_of(words) if flag not in known]
    return out


# ---------------------------------------------------------------------------------------------------------------
# the docs as they are

ALL = [(path.relative_to(REPO).as_posix(), cmd) for path in DOC_FILES
       for cmd in doc_commands(path.read_text(encoding="utf-8"))]


def test_the_docs_show_commands_of_every_kind():
    entries = {entry for _, (entry, _, _) in ALL}
    assert {"pipeline.run", "pipeline.train.finetune", "pipeline.train.evaluate", "make"} <= entries, entries
    assert any(e.startswith("pipeline.checks.") for e in entries) and any(e.startswith("benchmarks/") for e in entries)
    readme = [cmd for doc, cmd in ALL if doc == "README.md"]
    assert ("make", ["sample"]) in [(e, w) for e, w, _ in readme] and ("make", ["test"]) in [(e, w) for e, w, _ in readme]
    assert len(ALL) >= 40


@pytest.mark.parametrize("doc", sorted({doc for doc, _ in ALL}))
def test_every_flag_and_target_a_doc_names_exists(doc):
    assert problems([cmd for d, cmd in ALL if d == doc]) == []


def test_readme_is_short_with_contents():
    lines = (REPO / "README.md").read_text(encoding="utf-8").splitlines()
    assert len(lines) <= 250
    assert any(line.startswith("**Contents:**") for line in lines[:20])


def test_every_docs_page_starts_with_a_summary():
    for path in sorted((REPO / "docs").glob("*.md")):
        lines = path.read_text(encoding="utf-8").splitlines()
        assert lines[0].startswith("# ") and lines[2].startswith("**In short.**"), path.name


def test_docs_links_lead_to_files():
    for path in DOC_FILES:
        for target in re.findall(r"\]\(([^)#\s]+\.md)(?:#[^)]*)?\)", path.read_text(encoding="utf-8")):
            assert (path.parent / target).is_file(), f"{path.name} links to {target}"


# ---------------------------------------------------------------------------------------------------------------
# the checks can fail

MADE_UP = """
Some text with `--not_checked_in_prose` and a command in prose, `python -m pipeline.train.patching --model=M
--alpha 0.5 --inline_typo`.

```bash
OPENAI_API_KEY=sk-x HF_HOME=/tmp .venv/bin/python -m pipeline.run --stage=eval_sets \\
    --output_dir=out/x [--seed=S] \\
    --made_up_flag=1   # a comment naming --ignored_in_comment
python3 -m pipeline.train.finetune --data=D --images=I --out=O --no_such_option
.venv/bin/python -m pipeline.checks.negatives out/train --bogus_check
.venv/bin/python benchmarks/full_size.py --work /tmp/x --not_a_benchmark_flag
.venv/bin/hardpos --stage=all --runner=DaskRunner --dask_client_address=127.0.0.1:8786 --typo_flag
make sample test no_such_target
make test
```

```python
import datasets  # --flags here are not commands
datasets.load_dataset("x", "--not_a_flag")
```
"""


def test_extraction_joins_continuations_and_skips_env_and_comments():
    commands = doc_commands(MADE_UP)
    assert [entry for entry, _, _ in commands] == ["pipeline.run", "pipeline.train.finetune",
                                                 "pipeline.checks.negatives", "benchmarks/full_size.py",
                                                 "pipeline.run", "make", "make", "pipeline.train.patching"]
    assert flags_of(commands[0][1]) == ["--stage", "--output_dir", "--seed", "--made_up_flag"]


def test_made_up_flags_and_targets_are_caught():
    found = problems(doc_commands(MADE_UP))
    for bad in ("unknown flag --made_up_flag", "unknown flag --no_such_option", "unknown flag --bogus_check",
                "unknown flag --not_a_benchmark_flag", "unknown flag --typo_flag", "'no_such_target'",
                "unknown flag --inline_typo"):
        assert sum(bad in p for p in found) == 1, (bad, found)
    assert len(found) == 7, found  # and nothing else: --stage, --seed, --dask_client_address, sample, test are known


def test_an_unknown_module_is_caught():
    assert problems(doc_commands("```bash\npython -m pipeline.no_such_module --x\n```\n"))[0].startswith(
        "no such module pipeline.no_such_module")

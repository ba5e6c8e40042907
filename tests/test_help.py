"""--help lists every hardpos flag with its default, grouped by stage; mistakes are one line with a suggestion."""
import argparse
import re

import pytest
from conftest import one_error_line, run_cli

from pipeline.options import FLAG_GROUPS, add_flags, help_text


def flags_of(stage=None) -> dict[str, argparse.Action]:
    parser = argparse.ArgumentParser(add_help=False)
    add_flags(parser, stage)
    return {a.option_strings[0]: a for a in parser._actions}


def entries(text: str) -> dict[str, str]:
    """--flag -> its help entry (the lines up to the next flag or heading)."""
    found, current = {}, None
    for line in text.splitlines():
        m = re.match(r"  (--\w+)", line)
        if m:
            current = m.group(1)
            found[current] = line
        elif current and line.startswith("      "):
            found[current] += " " + line.strip()
        else:
            current = None
    return found


@pytest.mark.parametrize("flag", ["--help", "-h"])
def test_help_lists_every_flag_with_its_default_grouped(flag):
    result = run_cli(flag)
    assert result.returncode == 0, result.stderr
    shown = entries(result.stdout)
    every = flags_of()
    assert set(every) == set(shown), set(every) ^ set(shown)
    for name, action in every.items():
        assert "default" in shown[name], shown[name]
        if isinstance(action.default, (int, float)) and not isinstance(action.default, bool):
            assert re.search(rf"default:? {action.default:,}|default:? {action.default}", shown[name]) or \
                "default" in (action.help or ""), shown[name]
    headings = [line for line in result.stdout.splitlines() if re.match(r"^\S.*:$", line)]
    assert len(headings) >= len(FLAG_GROUPS)
    # a flag sits under its group's heading
    out = result.stdout
    assert out.index("\nimages:") < out.index("--image_root") < out.index("\npublish") < out.index("--hub_repo")
    assert "--help_beam" in result.stdout and "--runner" in result.stdout  # how to see Beam's flags


def test_stage_help_shows_only_the_flags_that_stage_reads():
    result = run_cli("--stage=eval_sets", "--help")
    assert result.returncode == 0, result.stderr
    shown = entries(result.stdout)
    assert set(shown) == set(flags_of("eval_sets"))
    assert "--vl_checklist_root" in shown and "--output_dir" in shown
    assert "--hub_repo" not in shown and "--llm_engine" not in shown and "--image_root" not in shown
    assert "--llm_engine" in flags_of("hard_positives") and "--hub_repo" in flags_of("publish")
    assert help_text("publish") != help_text("eval_sets")


def test_beam_help_lists_the_runner_flags():
    result = run_cli("--help_beam")
    assert result.returncode == 0, result.stderr
    assert "--runner" in result.stdout and "--direct_num_workers" in result.stdout and "--project" in result.stdout


@pytest.mark.parametrize("args,expected", [
    (["--stage=evalsets", "--output_dir=o"], "did you mean eval_sets?"),
    (["--stage=eval_sets", "--outptu_dir=o"], "unknown flag --outptu_dir (did you mean --output_dir?)"),
    (["--stage=eval_sets", "--output_dir=o", "--vl_checklist_root=samples/vl_checklist", "--runner=FooRunner"],
     "--runner=FooRunner: not a runner Beam knows"),
    (["--stage=eval_sets", "--output_dir=o", "--vl_checklist_root=samples/vl_checklist",
      "--runner=DirectRuner"], "did you mean DirectRunner?"),
    (["--stage=eval_sets", "--output_dir=o", "--vl_checklist_root=samples/vl_checklist",
      "--runner=no.such.module.Runner"], "--runner=no.such.module.Runner"),
])
def test_mistakes_are_one_line_exit_2_with_a_suggestion(args, expected):
    line = one_error_line(run_cli(*args))
    assert line.startswith("error: ") and expected in line, line

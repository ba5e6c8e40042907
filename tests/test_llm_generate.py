"""The generation loop without Beam: sampled retries of rejected prompts, seeds per prompt, cache entries."""
from __future__ import annotations

from pipeline.llm.cache import best_entry, cache_key, parse_line
from pipeline.llm.engines import Generation, Sampling
from pipeline.llm.generate import answer_batch, first_accepted, retry_seed
from pipeline.llm.validate import Validator

CAPTION = "A man sitting on a bench."


class ScriptedEngine:
    """Answers each prompt from a script: the i-th call for a prompt gets its i-th answer."""

    def __init__(self, script: dict[str, list[str]]):
        self.script, self.calls, self.params = script, {}, []

    def generate(self, prompts, params):
        out = []
        for prompt, p in zip(prompts, params, strict=True):
            k = self.calls.get(prompt, 0)
            self.calls[prompt] = k + 1
            self.params.append(p)
            answer = self.script[prompt][k]
            out.append(Generation("", "error", 0, "boom") if answer is None else Generation(answer, "stop", 5))
        return out


def element(prompt: str, caption: str = CAPTION, kind: str = "replace") -> dict:
    return {"key": cache_key("m", "sha", "llama2", {"t": 0}, caption + prompt), "prompt": prompt, "caption": caption,
            "kind": kind, "max_new_tokens": 30, "attempts": []}


def test_rejected_prompts_are_asked_again_with_sampling_and_their_own_seed():
    engine = ScriptedEngine({"p1": [CAPTION, "A man seated on a bench."], "p2": ["A guy sitting on a bench."]})
    validator = Validator(wordnet=False)
    batch = [element("p1"), element("p2")]
    entries, sent = answer_batch(batch, engine, Sampling(0), retries=2, retry_temperature=0.7, validator=validator)
    assert sent == 3 and engine.calls == {"p1": 2, "p2": 1}
    first, second = engine.params[:2], engine.params[2]
    assert all(p.temperature == 0 and p.seed is None for p in first)
    assert second.temperature == 0.7 and second.seed == retry_seed(batch[0]["key"], 1)
    assert first_accepted(batch[0], entries[0]["attempts"], validator) == 1
    assert first_accepted(batch[1], entries[1]["attempts"], validator) == 0


def test_without_retries_a_rejected_prompt_is_asked_once():
    engine = ScriptedEngine({"p1": [CAPTION]})
    entries, sent = answer_batch([element("p1")], engine, Sampling(0), 0, 0.7, Validator(wordnet=False))
    assert sent == 1 and len(entries[0]["attempts"]) == 1 and not entries[0]["failed"]


def test_a_failed_request_is_not_retried_in_the_run_and_marks_the_entry():
    engine = ScriptedEngine({"p1": [None, "A man seated on a bench."]})
    entries, sent = answer_batch([element("p1")], engine, Sampling(0), 3, 0.7, Validator(wordnet=False))
    assert sent == 1 and entries[0]["failed"]
    assert Validator(wordnet=False)(element("p1"), entries[0]["attempts"][0]).reason == "request_failed"


def test_earlier_attempts_from_the_cache_are_kept_and_continued():
    engine = ScriptedEngine({"p1": ["A man seated on a bench."]})
    e = element("p1")
    e["attempts"] = [{"text": CAPTION, "finish_reason": "stop", "output_tokens": 5, "error": "",
                      "sampling": {"max_new_tokens": 30, "temperature": 0.0, "top_p": 1.0, "seed": None}}]
    entries, sent = answer_batch([e], engine, Sampling(0), 1, 0.7, Validator(wordnet=False))
    assert sent == 1 and len(entries[0]["attempts"]) == 2 and engine.params[0].temperature == 0.7


def test_best_entry_is_independent_of_file_order_and_damaged_lines_are_misses():
    a = {"key": "k", "attempts": [{"text": "x"}]}
    b = {"key": "k", "attempts": [{"text": "x"}, {"text": "y"}]}
    c = {"key": "k", "attempts": [{"text": "z"}, {"text": "y"}]}
    assert best_entry([a, b, c]) == best_entry([c, b, a]) == best_entry([b, a, c])
    assert parse_line("{not json") is None and parse_line('{"no_key": 1}') is None
    # hardpos writes an entry only with an attempt (round 11, V24: one with none is damaged, a miss)
    assert parse_line('{"key": "k", "attempts": []}') is None
    assert parse_line('{"key": "k", "attempts": [{"text": "x", "finish_reason": "stop"}]}')[0] == "k"


def test_cache_key_changes_with_every_part():
    base = ("model", "sha", "llama2", {"temperature": 0.0}, "A cat.")
    keys = {cache_key(*base)}
    for i, other in enumerate(("model2", "sha2", "none", {"temperature": 0.5}, "A dog.")):
        changed = list(base)
        changed[i] = other
        keys.add(cache_key(*changed))
    assert len(keys) == 6


def test_replay_engine_answers_recorded_captions_and_fails_the_rest(tmp_path):
    import json

    from pipeline.llm.engines import EngineConfig, ReplayEngine
    from pipeline.llm.prompts import load_prompt

    path = tmp_path / "answers.jsonl"
    path.write_text(json.dumps({"positive_type": "replace", "caption": CAPTION, "text": "A man seated on a bench."})
                    + "\n\n" + json.dumps({"positive_type": "swap", "caption": CAPTION, "text": "x"}) + "\n")
    for chat_format in ("llama2", "none", "auto"):  # answers are matched by the rendered prompt text
        engine = ReplayEngine(EngineConfig("replay", "m", replay_path=str(path), chat_format=chat_format))
        known = load_prompt("replace").text(CAPTION)
        other = load_prompt("replace").text("Another caption.")
        got = engine.generate([known, other], [Sampling(30), Sampling(30)])
        assert got[0] == Generation("A man seated on a bench.", "stop", 6)
        assert got[1].finish_reason == "error" and "no recorded answer" in got[1].error
        # the same caption under another prompt is another answer
        assert engine.generate([load_prompt("swap").text(CAPTION)], [Sampling(20)])[0].text == "x"


def test_replay_files_with_bad_lines_are_refused_naming_the_line(tmp_path):
    import pytest

    from pipeline.llm.engines import ReplayError, read_replay

    for body, message in (('{"positive_type": "replace", "caption": "c"}\n', ":1: needs string fields"),
                          ('{"positive_type": "replace", "caption": "c", "text": "t"}\nnot json\n', ":2: not JSON"),
                          ('{"positive_type": "rewrite", "caption": "c", "text": "t"}\n', "unknown type")):
        path = tmp_path / "bad.jsonl"
        path.write_text(body)
        with pytest.raises(ReplayError, match=message):
            list(read_replay(str(path)))


def test_a_replay_answer_that_contradicts_an_earlier_one_is_refused_naming_both_lines(tmp_path):
    """The check runs on packed digests after the file is read (a dict of every answer took 0.3 GB per process at
    full size): the earliest contradicting line is named, an identical repeat is fine."""
    import json

    import pytest

    from pipeline.llm.engines import EngineConfig, ReplayEngine, ReplayError, read_replay
    from pipeline.llm.prompts import load_prompt

    line = lambda kind, caption, text: json.dumps({"type": kind, "caption": caption, "text": text}) + "\n"  # noqa
    path = tmp_path / "answers.jsonl"
    path.write_text(line("replace", "a", "x") + line("swap", "a", "y") + line("replace", "a", "x")
                    + line("replace", "b", "z") + line("swap", "a", "w") + line("replace", "a", "v"))
    with pytest.raises(ReplayError, match=r":5: a second, different answer .*first is on line 2"):
        list(read_replay(str(path)))
    path.write_text(line("replace", "a", "x") + line("swap", "a", "y") + line("replace", "a", "x")
                    + line("replace", "b", "zé"))
    engine = ReplayEngine(EngineConfig("replay", "m", replay_path=str(path)))
    assert len(engine.answers) == 4
    for kind, caption, text in (("replace", "a", "x"), ("swap", "a", "y"), ("replace", "b", "zé")):
        assert engine.generate([load_prompt(kind).text(caption)], [None])[0].text == text
    assert engine.generate([load_prompt("swap").text("b")], [None])[0].finish_reason == "error"

"""The large VLAC-style backend: answer parsing, prompt files and clear failures (no checkpoint here)."""

from __future__ import annotations

import json
import sys

import pytest

from robot_rl.rewards.vlac import PROMPTS_FILE, VlacPrompts, VlacScorer, parse_done, parse_percentage


def test_parse_percentage():
    assert parse_percentage("+25%") == pytest.approx(0.25)
    assert parse_percentage("<score> -12.5 </score>") == pytest.approx(-0.125)
    assert parse_percentage("350") == 1.0 and parse_percentage("-400%") == -1.0
    with pytest.raises(ValueError, match="no progress percentage"):
        parse_percentage("closer")


def test_parse_done():
    assert parse_done("Yes.") == 1.0 and parse_done(" no, not yet") == 0.0 and parse_done("1") == 1.0
    with pytest.raises(ValueError, match="cannot read"):
        parse_done("maybe")


def test_prompt_files(tmp_path):
    assert VlacPrompts.for_checkpoint(tmp_path) == VlacPrompts()
    own = {"pair": "<image><image><image> {task}?", "done": "<image> {task} done?"}
    (tmp_path / PROMPTS_FILE).write_text(json.dumps(own))
    assert VlacPrompts.for_checkpoint(tmp_path).pair == own["pair"]
    (tmp_path / PROMPTS_FILE).write_text(json.dumps({"pair": "<image> {task}", "done": own["done"]}))
    with pytest.raises(ValueError, match="3 <image>"):
        VlacPrompts.for_checkpoint(tmp_path)
    (tmp_path / PROMPTS_FILE).write_text(json.dumps({"critic": "x"}))
    with pytest.raises(ValueError, match="unknown prompt keys"):
        VlacPrompts.for_checkpoint(tmp_path)


def test_default_prompts_fit_the_parsers():
    prompts = VlacPrompts()
    assert prompts.pair.count("<image>") == 3 and prompts.done.count("<image>") == 1
    assert "pick up the cube" in prompts.pair.format(task="pick up the cube")


def test_load_fails_clearly(tmp_path, monkeypatch):
    with pytest.raises(FileNotFoundError, match="not a local VLAC checkpoint"):
        VlacScorer.load(tmp_path / "missing")
    (tmp_path / "config.json").write_text("{}")
    monkeypatch.setitem(sys.modules, "transformers", None)  # as if the vlac extra were not installed
    with pytest.raises(ImportError, match=r"robot_rl\[vlac\]"):
        VlacScorer.load(tmp_path)

"""``allgpu doctor --log``'s last fallback, the per-cause lexicon of the field's words
(:mod:`allgpu.doctor.log_cues`): a cause is named only when its cues lead clearly, marked as the lowest
confidence with the words it rested on; absent or split cues name nothing. Every log here was written by us:
fixtures, never a figure."""

from __future__ import annotations

import pytest

from allgpu.doctor.log_cues import read_cues
from allgpu.doctor.log_reader import read_log
from allgpu.doctor.verdict import verdict_from_log

pytestmark = pytest.mark.unit


def verdict(text: str):
    return verdict_from_log(read_log(text))


@pytest.mark.parametrize("text, cause", [
    # wordings no exact reader or family knows, in the field's words
    ("zapp: the CPU version of zapp is what you have; for the GPU one reinstall", "cpu-build"),
    ("widget: module does not export expected C variable fooBar (versions mismatch?)", "cuda-version-mismatch"),
    ("serve: the port 7000 cannot be used, another process is bound to it (set --master_port)", "port-in-use"),
])
def test_lexicon_names_a_clear_lead_with_its_words(text: str, cause: str) -> None:
    v = verdict(text)
    assert v.cause_ids[:1] == (cause,)
    first = v.findings[0]
    assert "field's words alone" in first.cause and "lowest confidence" in first.cause
    assert first.evidence and first.evidence[0].startswith("log line 1:")


@pytest.mark.parametrize("text", [
    "Epoch 1/10 loss 0.31 acc 0.91",                            # no cue
    "worker: unknown error",                                      # one weak word only
    "the driver could not be loaded; the port is in use",         # split: no-driver against port-in-use
])
def test_absent_weak_or_split_cues_name_nothing(text: str) -> None:
    assert verdict(text).cause_ids == ()


def test_split_cues_are_reported_per_cause() -> None:
    cues = read_cues(["the driver could not be loaded; the port is in use"])
    assert cues.cause is None
    assert set(cues.found) >= {"no-driver", "port-in-use"}


def test_a_known_message_keeps_precedence_over_the_lexicon() -> None:
    # the exact reader names out-of-memory; the CPU words beside it do not change the verdict
    text = ("RuntimeError: CUDA out of memory. Tried to allocate 20.00 MiB (GPU 0; 7.79 GiB total capacity)\n"
            "note: falling back to the CPU version next time")
    assert verdict(text).cause_ids[:1] == ("out-of-memory",)


def test_a_split_reading_lists_its_words_in_the_notes() -> None:
    v = verdict("the driver could not be loaded; the port is in use")
    assert any("too few or too split" in n and "port-in-use" in n for n in v.notes)

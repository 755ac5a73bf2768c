"""The benchmark workloads' texts through a fabricated model's frontend: one text token a word and one for the
full stop, as Qwen's vocabulary has them, so a take bounded by its text (20 speech tokens a text token, the
server's case) or admitted by it (bench --admit-by-text) runs and reserves the length the workload drew."""

from __future__ import annotations

from studio import workloads


def test_a_workload_text_is_one_text_token_a_word_and_one_for_its_full_stop(tiny_cosyvoice):
    for ratio in (workloads.SPEECH_TOKENS_PER_TEXT_TOKEN, 10):
        for take in workloads.takes("sentences", 60, speech_tokens_per_text_token=ratio):
            assert len(tiny_cosyvoice._encode(take.text)) == len(take.text.split()) + 1, take.text
            assert abs(ratio * (len(take.text.split()) + 1) - take.speech_tokens) <= ratio

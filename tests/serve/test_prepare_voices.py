"""The server makes its library voices' prompt states ahead of their first requests: every voice once the
model is loaded, and a voice registered through the API as soon as it is saved (`SpeechService.prepare_voices`),
so a voice's first request starts from the prompt cache."""

from __future__ import annotations

from studio.runtime.warmup import synthetic_voice
from studio.serve.service import SpeechService
from studio.voices import VoiceLibrary
from tests.serve.conftest import register_voice


def prepared(service: SpeechService, slug: str) -> bool:
    """Whether the voice's prompt state was made already (a made one is not made again)."""
    service._preparer.submit(lambda: None).result(120)  # one worker: every voice sent before is done
    prompt, rate, _ = service.voices.load_prompt(slug)
    return not service.loaded.model.prepare_voice(prompt, rate)


def test_a_voice_registered_through_the_api_is_prepared_as_soon_as_it_is_saved(server):
    base, service = server
    slug = register_voice(base, "Prepared Early", seconds=3.5)
    assert prepared(service, slug)


def test_the_library_voices_are_prepared_once_the_model_is_loaded(tiny_model_dir, tmp_path):
    voices = VoiceLibrary(tmp_path / "voices")
    voice = voices.save("Narrator", 0.4 * synthetic_voice(16000, 3.0, f0=187.0, seed=77), 16000, "A voice.")
    service = SpeechService(str(tiny_model_dir), voices, backend="pytorch", warmup=False)
    try:
        service.load()
        assert service.state == "ready" and prepared(service, voice.slug)
    finally:
        service.close()

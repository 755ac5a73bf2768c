"""Registering a voice through the API: decode the upload, clean it as the studio does (trim, cut to the
best 30 s, level), transcribe it when the server has an ASR model and no transcript was sent, and save it
in the studio's voice library."""

from __future__ import annotations

from studio.serve.protocol import ServiceError
from studio.voices import Voice, VoiceBusyError, VoiceError, VoiceExistsError, check_name

MAX_UPLOAD_SECONDS = 120.0


def register_voice(service, name: str, data: bytes, transcript: str, overwrite: bool) -> Voice:
    from studio.audio.clean import CleanOptions, clean_prompt
    from studio.audio.errors import AudioError
    from studio.serve.formats import decode_upload

    try:
        name = check_name(name)
    except VoiceError as exc:
        raise ServiceError(422, str(exc), "name") from None
    samples, rate = decode_upload(data, "audio", MAX_UPLOAD_SECONDS)
    try:
        cleaned = clean_prompt(samples, rate, CleanOptions(cut="auto"))
    except AudioError as exc:
        raise ServiceError(422, f"the recording cannot be a voice: {exc}", "audio") from None
    transcript = transcript.strip() or _transcribe(service, cleaned.samples, cleaned.sample_rate)
    try:
        return service.voices.save(
            name, cleaned.samples, cleaned.sample_rate, transcript, samples, rate, overwrite=overwrite
        )
    except VoiceExistsError as exc:
        raise ServiceError(409, f"{exc}; send overwrite=true to replace it", "name") from None
    except VoiceBusyError as exc:
        raise ServiceError(409, f"{exc}; try again", "name") from None
    except VoiceError as exc:
        raise ServiceError(422, str(exc), "name") from None


def _transcribe(service, samples, rate: int) -> str:
    """The ASR's transcript when the server has an ASR model, else "" (the voice then works cross-lingually)."""
    if not service.asr_model:
        return ""
    from studio.asr.transcriber import AsrError, Transcriber, resolve_model

    try:
        with service.asr_lock:
            if service.transcriber is None:
                service.transcriber = Transcriber(resolve_model(service.asr_model))
        return service.transcriber.transcribe(samples, rate).text
    except AsrError as exc:
        raise ServiceError(
            422, f"no transcript was sent and the ASR could not make one ({exc}); send one", "transcript"
        ) from None

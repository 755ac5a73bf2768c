"""The response formats of ``/v1/audio/speech``: whole files through libsndfile (WAV, FLAC, MP3, Opus), raw
PCM, and the two that stream: PCM (s16le) and WAV with an open-ended header; and uploaded audio decoded."""

from __future__ import annotations

import io
import struct

import numpy as np

from studio.serve.service import ServiceError

#: response_format -> (media type, libsndfile container, subtype); "pcm" is raw s16le, no container
FORMATS = {
    "wav": ("audio/wav", "WAV", "PCM_16"),
    "flac": ("audio/flac", "FLAC", "PCM_16"),
    "mp3": ("audio/mpeg", "MP3", "MPEG_LAYER_III"),
    "opus": ("audio/ogg", "OGG", "OPUS"),
    "pcm": ("audio/pcm", None, None),
}
STREAMABLE = ("pcm", "wav")
OPEN_ENDED = 0xFFFFFFFF  # a RIFF size meaning "until the stream ends" (players read to the end)


def pcm16(samples: np.ndarray) -> bytes:
    """s16le, scaled, rounded and clipped as exported WAVs are (`studio.audio.export.to_fixed_point`)."""
    from studio.audio.export import to_fixed_point

    return to_fixed_point(samples, 32767)[0].astype("<i2").tobytes()


def wav_stream_header(sample_rate: int) -> bytes:
    """A 16-bit mono WAV header whose sizes are open-ended, for a file that is still being made."""
    return (
        b"RIFF"
        + struct.pack("<I", OPEN_ENDED)
        + b"WAVE"
        + b"fmt "
        + struct.pack("<IHHIIHH", 16, 1, 1, sample_rate, sample_rate * 2, 2, 16)
        + b"data"
        + struct.pack("<I", OPEN_ENDED)
    )


def encode(samples: np.ndarray, sample_rate: int, response_format: str) -> bytes:
    """A whole take in ``response_format``."""
    _media, container, subtype = FORMATS[response_format]
    if container is None:
        return pcm16(samples)
    from studio.audio.export import encode_audio

    return encode_audio(np.asarray(samples, dtype=np.float32), sample_rate, container, subtype)


def decode_upload(data: bytes) -> tuple[np.ndarray, int]:
    """An uploaded recording as float32 mono; a ServiceError (422) when it is not audio."""
    import soundfile as sf

    try:
        samples, rate = sf.read(io.BytesIO(data), dtype="float32", always_2d=True)
    except Exception as exc:  # noqa: BLE001 - libsndfile's reasons vary
        raise ServiceError(
            422, f"the uploaded file is not audio libsndfile can read: {exc}", "audio"
        ) from None
    return samples.mean(axis=1), int(rate)

"""The response formats of ``/v1/audio/speech``: whole files through libsndfile (WAV, FLAC, MP3, Opus), raw
PCM, and the two that stream: PCM (s16le) and WAV with an open-ended header; and uploaded audio decoded."""

from __future__ import annotations

import io
import struct

import numpy as np

from studio.serve.protocol import ServiceError

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


MAX_CHANNELS = 8
RATES = (8000, 192000)


def decode_upload(data: bytes, param: str, max_seconds: float) -> tuple[np.ndarray, int]:
    """An uploaded recording as float32 mono. Its header is checked first (rate, channels, duration: a long
    file is refused with 413 before a sample is decoded) and at most ``max_seconds`` are ever decoded; a
    ServiceError naming ``param`` when it is not audio or not acceptable."""
    import soundfile as sf

    try:
        info = sf.info(io.BytesIO(data))
    except Exception as exc:  # noqa: BLE001 - libsndfile's reasons vary
        raise ServiceError(422, f"{param} is not audio libsndfile can read: {exc}", param) from None
    if not RATES[0] <= info.samplerate <= RATES[1] or not 1 <= info.channels <= MAX_CHANNELS:
        heard = f"{info.channels} channels at {info.samplerate} Hz"
        allowed = f"at most {MAX_CHANNELS} channels at {RATES[0]}..{RATES[1]} Hz"
        raise ServiceError(422, f"{param} has {heard}; {allowed}", param)
    limit = int(max_seconds * info.samplerate)
    if info.frames > limit:
        seconds = info.frames / info.samplerate
        raise ServiceError(413, f"{param} is {seconds:.0f} s long; at most {max_seconds:.0f} s", param)
    try:
        samples, rate = sf.read(io.BytesIO(data), frames=limit + 1, dtype="float32", always_2d=True)
    except Exception as exc:  # noqa: BLE001
        raise ServiceError(422, f"{param} is not audio libsndfile can read: {exc}", param) from None
    if len(samples) > limit or len(samples) == 0:  # a header that lied about its length
        what = "empty" if len(samples) == 0 else f"longer than {max_seconds:.0f} s"
        raise ServiceError(413 if len(samples) else 422, f"{param} is {what}", param)
    return samples.mean(axis=1), int(rate)

"""The CosyVoice2 flow: speech tokens -> 80-bin mel at 50 Hz (encoder + conditional flow matching)."""

from studio.tts.flow.cfm import CausalConditionalCFM
from studio.tts.flow.encoder import UpsampleConformerEncoder
from studio.tts.flow.estimator import CausalConditionalDecoder
from studio.tts.flow.flow import CausalMaskedDiffWithXvec

__all__ = [
    "CausalConditionalCFM",
    "CausalConditionalDecoder",
    "CausalMaskedDiffWithXvec",
    "UpsampleConformerEncoder",
]

"""CosyVoice Studio: a desktop voice-cloning studio for CosyVoice2-0.5B, accelerated by vLLM."""

__version__ = "0.1.0"

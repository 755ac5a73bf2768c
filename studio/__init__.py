"""CosyVoice Studio: a desktop voice-cloning studio for CosyVoice2-0.5B, accelerated by vLLM."""

__version__ = "0.1.0"

from studio import lifetime as _lifetime  # noqa: E402 - after the version: lifetime reads nothing of it

_lifetime.arm_if_spawning()  # a child multiprocessing spawns (vLLM's engine core) ends with its parent

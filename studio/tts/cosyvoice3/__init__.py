"""CosyVoice3 (Fun-CosyVoice3-0.5B): its own flow (PreLookaheadLayer + DiT) and causal HiFT vocoder, in plain torch."""

"""Everything before the LM: text normalisation and tokens, audio features, the ONNX prompt models."""

"""HiFT vocoder: the model (`model`, `source`) and its CUDA-graph replay (`graphs`)."""

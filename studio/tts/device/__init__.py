"""Device plumbing shared by the speed-ups: CUDA-graph capture, host-to-device copies."""

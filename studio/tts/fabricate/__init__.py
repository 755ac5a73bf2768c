"""Random-weight model folders in the official layout (tests, benchmarks). The runtime never imports this."""

"""The engine process as the window sees it: the bridge, its status, and the GPU panel."""

# GPU tests (added with the CUDA backend).

"""Benchmarks: local-training throughput against a DataLoader pipeline (`throughput`), the paper
round timed per precision mode (`paper_round`), both as `fedhet bench` (`cli`), and the GPU
check of a GPU machine (`gpucheck`, run by `ci/gpu-check.sh`)."""

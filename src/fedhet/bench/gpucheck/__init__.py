"""The GPU check (`fedhet gpu-check`, `ci/gpu-check.sh`): a CUDA smoke test and benchmark for
any GPU machine.

`check`: the command: the parts in order, each in a process of its own under its time budget,
then the summary. `records`: the results file, one JSON record per measurement, and its
summary table. `parts`: the check's parts other than the paper round (`fedhet bench
--round-time`): the CUDA tests, runs sharing one GPU against the same runs one after another,
one real-data run. `python -m fedhet.bench.gpucheck` runs one part, or records a part that did
not finish.
"""

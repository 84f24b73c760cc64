"""The workflow's execution on this machine: the fork server that `fedhet` commands and the
workflow's scripts start from (`server`, its `protocol` and client side, the `launcher` the
workflow uses, a job's processes `job`, `lifeline`, `jobstate`, its private socket directory
`sockdir`, peer credentials `peercred`), the GPU shares of local GPU jobs (`gpushare`), and the
timing of a finished run from Snakemake's log (`joblog`)."""

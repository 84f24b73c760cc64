"""What runs cost before they run (`fedhet cost`): training and evaluation images, their FLOPs
and GPU-hours per run and per scale (`estimate`), at throughputs assumed or measured
(`throughput`). Torch-free until a model's FLOPs are counted (`fedhet.models.flops`)."""

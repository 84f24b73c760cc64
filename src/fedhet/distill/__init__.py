"""FedLGD's local and global virtual data: differentiable Siamese augmentation (`dsa`), and
the initialisation, distribution matching and federated gradient matching (`matching`)."""

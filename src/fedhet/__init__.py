"""fedhet: federated learning under data heterogeneity, reproducibly."""

__version__ = "0.1.0"

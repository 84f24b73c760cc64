"""Paper methods built on the engine; importing this package registers their plug-ins."""

from fedhet.methods import ccvr_plugins  # noqa: F401  (clsnorm, clsprox)

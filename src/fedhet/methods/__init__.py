"""Paper methods built on the engine; importing this package registers their plug-ins."""

from fedhet.methods import ccvr_plugins  # noqa: F401  (clsnorm, clsprox)
from fedhet.methods import feddf, vhl  # noqa: F401  (feddf, vhl)

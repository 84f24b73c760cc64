"""Post-hoc steps on a finished run: CCVR classifier calibration and its oracle.

`fedhet.posthoc.ccvr.calibrate` does the work (imports torch); `fedhet.posthoc.settings`
holds the torch-free settings and defaults; `fedhet.posthoc.cli` adds `fedhet calibrate`.
"""

from typing import Any

__all__ = ["calibrate"]


def calibrate(*args: Any, **kwargs: Any) -> Any:
    """See `fedhet.posthoc.ccvr.calibrate` (imported on first call)."""
    from fedhet.posthoc.ccvr import calibrate as _calibrate

    return _calibrate(*args, **kwargs)

"""argparse value types shared by the `fedhet` subcommands."""

from __future__ import annotations

import argparse
import json
from typing import Any


def json_object(text: str) -> dict[str, Any]:
    """argparse type: a JSON object given on the command line."""
    try:
        value = json.loads(text)
    except json.JSONDecodeError as err:
        raise argparse.ArgumentTypeError(f"not valid JSON ({err}): {text!r}") from None
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError(f"expected a JSON object, got {text!r}")
    return value

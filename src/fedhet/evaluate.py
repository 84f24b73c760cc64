"""Evaluate a saved model of a finished run on that run's test set."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from fedhet.saved import open_run


def evaluate_run(run_dir: str | os.PathLike, model_path: str | os.PathLike | None = None,
                 device: str = "auto") -> dict[str, Any]:
    """Test accuracy and loss of a run's model (default: its final `model.pt`), scored as the
    engine scored it during training."""
    saved = open_run(run_dir, model_path, device)
    acc, loss = saved.evaluate()
    return {"test_acc": acc, "test_loss": loss,
            "model": str(model_path or Path(run_dir) / "model.pt")}

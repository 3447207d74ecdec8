"""The device a user names, checked before any work: one that this machine cannot run is refused
with what to do, not met inside the first training step."""

from __future__ import annotations

import torch


def usable_device(device: str | torch.device, name: str = "device") -> torch.device:
    """``device`` as a ``torch.device``, refused when this process cannot use it.

    Args:
        device: "cpu", "cuda", "cuda:1", "mps", ... or a ``torch.device``.
        name: the argument's name in the messages.

    Raises:
        ValueError: not a device name; "cuda" where torch has no CUDA (a CPU build, or no GPU
            visible, e.g. ``CUDA_VISIBLE_DEVICES`` empty); a CUDA index past the visible GPUs;
            "mps" where MPS is not available.
    """
    try:
        parsed = torch.device(device)
    except (RuntimeError, TypeError):
        raise ValueError(
            f"{name}={device!r}: not a device; use 'cpu', 'cuda' or 'cuda:N'"
        ) from None
    if parsed.type == "cuda":
        if not torch.cuda.is_available():
            why = (
                "this torch is built without CUDA"
                if torch.version.cuda is None
                else "no CUDA GPU is visible to this process"
            )
            raise ValueError(f"{name}={str(device)!r}: {why}; use device='cpu'")
        count = torch.cuda.device_count()
        if parsed.index is not None and parsed.index >= count:
            raise ValueError(
                f"{name}={str(device)!r}: this process sees {count} CUDA GPU(s), cuda:0 .. "
                f"cuda:{count - 1}"
            )
    if parsed.type == "mps" and not torch.backends.mps.is_available():
        raise ValueError(f"{name}={str(device)!r}: MPS is not available here; use device='cpu'")
    return parsed

"""Rewrite a stored training checkpoint's Adam state from two parameter groups to one.

Checkpoints written before the optimizer's groups came from the families' parameter roles hold
two groups when log alpha shares the other parameters' learning rate: every parameter whose name
ends in ``log_alpha`` in a second group, after the others. The trainer now builds one group, in
the module's parameter order, when no role has a rate of its own. Adam's state is per parameter,
so the two layouts train the same numbers; only the indices of the stored state differ. This
script moves each parameter's state to its index in the one group (checking every moment's
shape against the stored parameter), so that the run resumes where it stopped.

    python reproductions/variance-networks/one_optimizer_group.py \
        reproductions/variance-networks/gpu-200/runs/33b2d71fa212efc2.checkpoint.pt
"""

from __future__ import annotations

import argparse
import io
from pathlib import Path

import torch

from vbnn.stores.atomic import write_atomic

BUFFERS = ("running_mean", "running_var", "num_batches_tracked")


def one_group(checkpoint: dict) -> bool:
    """Merge the two stored groups in place; False when the checkpoint already has one."""
    optimizer = checkpoint["optimizer"]
    groups = optimizer["param_groups"]
    if len(groups) == 1:
        return False
    if len(groups) != 2 or groups[0]["lr"] != groups[1]["lr"]:
        raise ValueError("expected two groups with one learning rate (log alpha at the same rate)")
    names = [name for name in checkpoint["model"] if not name.endswith(BUFFERS)]
    alphas = [name for name in names if name.endswith("log_alpha")]
    old = [name for name in names if name not in alphas] + alphas
    if [len(group["params"]) for group in groups] != [len(names) - len(alphas), len(alphas)]:
        raise ValueError("the stored groups do not split the model's parameters by log alpha")
    state = {}
    for index, moments in optimizer["state"].items():
        name = old[index]
        for key in ("exp_avg", "exp_avg_sq"):
            if moments[key].shape != checkpoint["model"][name].shape:
                raise ValueError(f"{name}: {key} {tuple(moments[key].shape)} does not fit it")
        state[names.index(name)] = moments
    merged = {key: value for key, value in groups[0].items() if key != "params"}
    optimizer["state"] = dict(sorted(state.items()))
    optimizer["param_groups"] = [{**merged, "params": list(range(len(names)))}]
    return True


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("checkpoints", nargs="+", type=Path)
    for path in parser.parse_args().checkpoints:
        checkpoint = torch.load(path, map_location="cpu", weights_only=False)
        if not one_group(checkpoint):
            print(f"{path}: one group already")
            continue
        buffer = io.BytesIO()
        torch.save(checkpoint, buffer)
        write_atomic(path, buffer.getvalue())
        print(f"{path}: one group")


if __name__ == "__main__":
    main()

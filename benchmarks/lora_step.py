"""Step time and memory of Bayesian LoRA against point LoRA on a GPT-2 causal language model.

    OMP_NUM_THREADS=1 python benchmarks/lora_step.py --out benchmarks/results/lora_step.json
    OMP_NUM_THREADS=1 python benchmarks/lora_step.py --preset gpt2 --batch-size 2 --length 128 \
        --rounds 5 --steps 2 --warmup 1 --out benchmarks/results/lora_step_gpt2.json
    python benchmarks/lora_step.py --device cuda --preset gpt2 --out ...

The model is a ``GPT2LMHeadModel`` built from a ``GPT2Config`` (random weights, nothing
downloaded; ``--preset small``: 4 layers of width 256, vocabulary 4096, 128 positions; ``gpt2``:
GPT-2 small's 12 layers of width 768, vocabulary 50257, 1024 positions), adapted on ``c_attn``
(the fused query, key and value projection, Hugging Face ``Conv1D``) with rank 8 and alpha 16.
A step is a fine-tuning step: ``zero_grad``, the forward pass of a batch of random token ids
(``--batch-size`` sequences of ``--length`` tokens) with ``labels`` (the causal LM loss, mean
token NLL), plus KL / N for the Bayesian arms (N = ``--dataset-size``, the predicted tokens of
the data set), backward, the optimiser's step. Arms:

* ``torch LoRA``: a hand-written point adapter (two ``nn.Parameter`` factors), the floor;
* ``point LoRA``: ``vbnn.convert(model, "point", adapter=vbnn.LoRA(...))``, Adam;
* ``mf LoRA``: ``vbnn.convert(model, "mf", adapter=...)`` (one draw of A per step), Adam;
* ``mf LoRA, LRT``: the same with ``training_mode="local"`` (a draw per token), Adam;
* ``mf LoRA, IVON``: the first mf model trained by ``vbnn.IVON`` (the prior as its weight
  decay, no KL term).

After ``--warmup`` steps each, every one of ``--rounds`` rounds runs ``--steps`` steps of each
arm in turn (interleaved, so that a change of the machine's load reaches all alike). Reported:
the median step over all rounds, its ratio to point LoRA's (the median of the rounds' ratios),
each in wall time and in this process's CPU time (on a shared machine with one torch thread the
CPU time leaves out the time other jobs hold the core), the bytes of the trainable parameters
and of the optimiser's state, the bytes of the activations a step saves for its backward pass
(unique storages seen by ``torch.autograd.graph.saved_tensors_hooks``, parameters excluded),
and on CUDA the peak memory a step allocates above the model's. Every arm ends with its
pretrained weights checked bitwise against the model it started from.
"""

from __future__ import annotations

import argparse
import copy
import json
import platform
import statistics
import time
from collections.abc import Callable
from pathlib import Path

import torch
from torch import nn
from transformers import GPT2Config, GPT2LMHeadModel

import vbnn
from vbnn.networks.summary import human_bytes

PRESETS = {
    "tiny": {"n_embd": 32, "n_layer": 2, "n_head": 2, "vocab_size": 64, "n_positions": 16},
    "small": {"n_embd": 256, "n_layer": 4, "n_head": 4, "vocab_size": 4096, "n_positions": 128},
    "gpt2": {"n_embd": 768, "n_layer": 12, "n_head": 12, "vocab_size": 50257, "n_positions": 1024},
}
RANK, ALPHA, TARGETS = 8, 16.0, ("c_attn",)


class TorchLoRA(nn.Module):
    """y = base(x) + (alpha / r) x A^T B^T with plain parameters: A (r, I) ~ N(0, 1/I), B = 0."""

    def __init__(self, base: nn.Module, inputs: int, outputs: int) -> None:
        super().__init__()
        self.base = base.requires_grad_(False)
        self.down = nn.Parameter(torch.randn(RANK, inputs) / inputs**0.5)
        self.up = nn.Parameter(torch.zeros(outputs, RANK))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.base(x) + (ALPHA / RANK) * (x @ self.down.t() @ self.up.t())


def torch_lora(model: nn.Module) -> nn.Module:
    adapted = copy.deepcopy(model).requires_grad_(False)
    for block in adapted.transformer.h:
        inputs, outputs = block.attn.c_attn.weight.shape
        block.attn.c_attn = TorchLoRA(block.attn.c_attn, inputs, outputs)
    return adapted


Arm = tuple[nn.Module, torch.optim.Optimizer, Callable[[nn.Module], torch.Tensor]]


def arms(model: nn.Module, args: argparse.Namespace) -> dict[str, Arm]:
    """name -> (model, optimiser, KL term added to the loss)."""
    adapter = vbnn.LoRA(rank=RANK, alpha=ALPHA, targets=TARGETS)
    no_kl = lambda network: 0.0  # noqa: E731
    kl = lambda network: vbnn.kl(network) / args.dataset_size  # noqa: E731

    def adam(network: nn.Module) -> torch.optim.Optimizer:
        return torch.optim.Adam([p for p in network.parameters() if p.requires_grad], lr=1e-4)

    plain = torch_lora(model)
    point = vbnn.convert(model, "point", adapter=adapter)
    mf = vbnn.convert(model, "mf", adapter=adapter)
    lrt = vbnn.convert(model, "mf", adapter=adapter, training_mode="local")
    ivon_model = vbnn.convert(model, "mf", adapter=adapter)
    ivon = vbnn.IVON().build(
        ivon_model,
        nn.Module(),
        learning_rate=1e-4,
        rates={},
        prior=None,
        dataset_size=args.dataset_size,
    )
    return {
        "torch LoRA": (plain, adam(plain), no_kl),
        "point LoRA": (point, adam(point), no_kl),
        "mf LoRA": (mf, adam(mf), kl),
        "mf LoRA, LRT": (lrt, adam(lrt), kl),
        "mf LoRA, IVON": (ivon_model, ivon, no_kl),
    }


def step(arm: Arm, ids: torch.Tensor) -> None:
    network, optimizer, kl = arm
    optimizer.zero_grad(set_to_none=True)
    loss = network(input_ids=ids, labels=ids).loss + kl(network)
    loss.backward()
    optimizer.step()


def saved_activation_bytes(arm: Arm, ids: torch.Tensor) -> int:
    """Bytes of the unique storages one step's forward pass saves for backward, parameters and
    buffers excluded."""
    network = arm[0]
    owned = {t.untyped_storage().data_ptr() for t in [*network.parameters(), *network.buffers()]}
    storages: dict[int, int] = {}

    def pack(tensor: torch.Tensor) -> torch.Tensor:
        storage = tensor.untyped_storage()
        if storage.data_ptr() not in owned:
            storages[storage.data_ptr()] = storage.nbytes()
        return tensor

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
        loss = network(input_ids=ids, labels=ids).loss + arm[2](network)
    loss.backward()
    arm[1].zero_grad(set_to_none=True)
    return sum(storages.values())


def tensor_bytes(tensors) -> int:
    return sum(t.numel() * t.element_size() for t in tensors if isinstance(t, torch.Tensor))


def measure(args: argparse.Namespace) -> dict:
    device = torch.device(args.device)
    torch.manual_seed(0)
    config = GPT2Config(**PRESETS[args.preset], bos_token_id=0, eos_token_id=0)
    model = GPT2LMHeadModel(config).to(device)
    pretrained = {k: v.clone() for k, v in model.state_dict().items()}
    runs = arms(model, args)
    length = args.length or config.n_positions
    ids = torch.randint(0, config.vocab_size, (args.batch_size, length), device=device)
    sync = torch.cuda.synchronize if device.type == "cuda" else lambda: None
    for arm in runs.values():
        arm[0].to(device).train()
        for _ in range(args.warmup):
            step(arm, ids)
    clocks = {"": time.perf_counter, "cpu_": time.process_time}  # wall; this process's CPU
    times = {(clock, name): [] for clock in clocks for name in runs}
    ratios = {(clock, name): [] for clock in clocks for name in runs}
    for _ in range(args.rounds):
        for name, arm in runs.items():
            sync()
            start = {clock: read() for clock, read in clocks.items()}
            for _ in range(args.steps):
                step(arm, ids)
            sync()
            for clock, read in clocks.items():
                times[clock, name].append((read() - start[clock]) / args.steps * 1e3)
        for clock in clocks:
            for name in runs:
                ratios[clock, name].append(times[clock, name][-1] / times[clock, "point LoRA"][-1])
    rows = []
    for name, arm in runs.items():
        network, optimizer, _ = arm
        state = [t for s in optimizer.state.values() for t in s.values()]
        row = {
            "arm": name,
            **{f"{clock}step_ms": statistics.median(times[clock, name]) for clock in clocks},
            **{
                f"{clock}ratio_to_point_lora": statistics.median(ratios[clock, name])
                for clock in clocks
            },
            "trainable_bytes": tensor_bytes(p for p in network.parameters() if p.requires_grad),
            "optimizer_state_bytes": tensor_bytes(state),
            "saved_activation_bytes": saved_activation_bytes(arm, ids),
        }
        if device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(device)
            base = torch.cuda.memory_allocated(device)
            step(arm, ids)
            sync()
            row["cuda_peak_step_bytes"] = torch.cuda.max_memory_allocated(device) - base
        row["pretrained_bitwise"] = all(
            torch.equal(tensor, pretrained[key.replace(".base.", ".")])
            for key, tensor in network.state_dict().items()
            if key.replace(".base.", ".") in pretrained
        )
        rows.append(row)
    return {
        "settings": vars(args),
        "machine": platform.processor() or platform.machine(),
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
        "rows": rows,
    }


def table(result: dict) -> str:
    lines = [
        "| arm | step ms | / point LoRA | CPU ms | / point LoRA | trainable | optimiser state "
        "| saved activations |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for row in result["rows"]:
        sizes = [
            human_bytes(row[key])
            for key in ("trainable_bytes", "optimizer_state_bytes", "saved_activation_bytes")
        ]
        lines.append(
            f"| {row['arm']} | {row['step_ms']:.1f} | {row['ratio_to_point_lora']:.2f} | "
            f"{row['cpu_step_ms']:.1f} | {row['cpu_ratio_to_point_lora']:.2f} | "
            + " | ".join(sizes)
            + " |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", choices=sorted(PRESETS), default="small")
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--length", type=int, help="tokens a sequence (default: n_positions)")
    parser.add_argument("--dataset-size", type=int, default=1_000_000)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    result = measure(args)
    print(table(result))
    for row in result["rows"]:
        if not row["pretrained_bitwise"]:
            raise SystemExit(f"{row['arm']}: a pretrained weight changed")
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=2, default=str) + "\n")


if __name__ == "__main__":
    main()

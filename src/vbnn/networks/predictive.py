"""Predictive samples of any network holding family layers.

``sample(model, x, num_samples)`` stacks K forward passes into (K, N, ...): with ``mode="weights"``
(the default) each pass draws one weight sample shared by the batch, so sample k is one function
f_k drawn from q; ``mode="sample"`` draws the pre-activations per example (the LRT: the same
per-example marginals, cheaper, but no function-level correlation across examples). Passes run
without autograd, ``batch_size`` examples at a time, into one preallocated output, so memory is
the output plus one pass whatever K; every chunk of sample k restarts the random streams from the
same state, so in "weights" mode the chunks of one sample share its weights.
"""

from __future__ import annotations

import torch
from torch import nn

from vbnn.core.contracts import ForwardMode
from vbnn.core.randomness import NoiseSource
from vbnn.layers.modes import takes_mode, use_mode, use_noise, variational_layers


@torch.no_grad()
def sample(
    model: nn.Module,
    x: torch.Tensor,
    num_samples: int,
    mode: ForwardMode | str = ForwardMode.WEIGHTS,
    batch_size: int | None = None,
    noise: NoiseSource | None = None,
) -> torch.Tensor:
    """K = ``num_samples`` outputs of ``model`` on ``x`` (N, ...): (K, N, ...).

    Args:
        mode: "weights" (one weight draw per pass, default), "sample" (LRT) or "zero-mean".
        batch_size: examples per pass (None: all of them).
        noise: a noise source (e.g. ``ModelGenerators([seed])``) for any network; None: the
            layers' own ``generator`` or torch's global RNG (seed it for repeatable samples).

    Raises:
        ValueError: ``num_samples`` or ``batch_size`` < 1, a mode outside the three, or a model
            with no family layer (its samples would all be equal).
    """
    if num_samples < 1 or (batch_size is not None and batch_size < 1):
        raise ValueError(f"sample: num_samples={num_samples}, batch_size={batch_size}: need >= 1")
    if str(getattr(mode, "value", mode)) not in ("weights", "sample", "zero-mean"):
        raise ValueError(f"sample: mode {mode!r}; choose 'weights', 'sample' or 'zero-mean'")
    if not variational_layers(model):
        raise ValueError(f"sample: {type(model).__name__} holds no vbnn family layer")
    rows = x.shape[0]
    step = batch_size or rows
    streams = _streams(model, x.device, noise)
    out: torch.Tensor | None = None
    with use_mode(model, mode):
        for k in range(num_samples):
            states = [stream.get_state() for stream in streams]
            for start in range(0, rows, step):
                for stream, state in zip(streams, states, strict=True):
                    stream.set_state(state)
                chunk = x[start : start + step]
                if takes_mode(model):
                    value = model(chunk, None, noise)
                else:
                    with use_noise(model, noise):
                        value = model(chunk)
                if out is None:
                    out = value.new_empty((num_samples, rows, *value.shape[1:]))
                out[k, start : start + len(chunk)] = value
    assert out is not None
    return out


def _streams(model: nn.Module, device: torch.device, noise: NoiseSource | None):
    """Every ``torch.Generator`` a pass of ``model`` may draw from."""
    streams = [torch.default_generator]
    if device.type == "cuda":
        streams.append(torch.cuda.default_generators[device.index or 0])
    streams += [m.generator for m in variational_layers(model) if m.generator is not None]
    streams += list(getattr(noise, "generators", []))
    return list({id(stream): stream for stream in streams}.values())

"""The batch rule: how a batch reaches a model and how its output becomes the prediction.

Every part of vbnn that calls a network (``vbnn.train``'s steps and validation, ``vbnn.sample``,
``vbnn.compare``, ``vbnn.diagnose``) goes through this module, so a model of the HuggingFace
``transformers`` library is used as it comes, without a wrapper:

* **inputs and target**: a batch is either a pair ``(x, y)``, the model called as ``model(x)``
  and ``y`` the target, or a mapping of tensors (a tokenizer's output, a HuggingFace collator's
  batch), the target ``batch[rule.target]`` ("labels") and the model called as
  ``model(**inputs)`` with the other keys (``input_ids``, ``attention_mask``, ...). Integer
  inputs (token ids) stay integers.
* **prediction**: an output that is a tensor is the prediction; a mapping (a ``ModelOutput``,
  a dict) gives ``output[rule.output]`` ("logits").
* **examples**: a target with one label per example, (N,), pairs with logits (N, C). A target
  with one label per token, (N, T), pairs with logits (N, T, C): a sequence is one example and
  its log-likelihood is the sum over its tokens, log p(y_n | x_n) = sum_t log p(y_nt | x_n),
  tokens labelled ``rule.ignore_index`` (-100, HuggingFace's) left out. For a causal language
  model (``rule.causal``; None: a model whose class name ends in ``ForCausalLM`` or
  ``LMHeadModel``) the logits at position t predict the label at t + 1, as HuggingFace shifts
  them: log p(y_n | x_n) = sum_{t < T} log p(y_{n,t+1} | x_{n,<=t}), the chain rule of the
  sequence's probability. The ELBO's data term then counts sequences: N is the number of
  sequences, and a batch of B sequences is scaled by N / B.

A model's rule is ``BatchRule()`` unless its attribute ``vbnn_batch_rule`` holds another
(``model.vbnn_batch_rule = vbnn.BatchRule(target="label")``); it is kept by ``deepcopy`` and
``vbnn.convert``. Mapping inputs are for one network: a stack of models (a model dimension)
takes tensors only.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

RULE_ATTRIBUTE = "vbnn_batch_rule"
CAUSAL_SUFFIXES = ("ForCausalLM", "LMHeadModel")
Inputs = torch.Tensor | Mapping[str, torch.Tensor]


@dataclass(frozen=True)
class BatchRule:
    """How a mapping batch maps to a model's inputs and target, and its output to the
    prediction (module docstring).

    Attributes:
        target: the key of the target in a mapping batch.
        output: the key of the prediction in a mapping output (``ModelOutput``).
        causal: shift per-token targets by one position (a causal language model); None: by the
            model's class name.
        ignore_index: per-token labels left out of the likelihood.
    """

    target: str = "labels"
    output: str = "logits"
    causal: bool | None = None
    ignore_index: int = -100


DEFAULT_RULE = BatchRule()


def batch_rule(model: nn.Module) -> BatchRule:
    """``model``'s rule: its ``vbnn_batch_rule`` attribute, else the defaults, ``causal`` read
    from its class name."""
    rule = getattr(model, RULE_ATTRIBUTE, None) or DEFAULT_RULE
    if rule.causal is None:
        causal = type(model).__name__.endswith(CAUSAL_SUFFIXES)
        rule = BatchRule(rule.target, rule.output, causal, rule.ignore_index)
    return rule


def split_batch(batch: Any, rule: BatchRule, name: str = "data") -> tuple[Inputs, torch.Tensor]:
    """(inputs, target) of a batch: an (x, y) pair as it is; a mapping's ``rule.target`` and
    the other entries.

    Raises:
        ValueError: a mapping without the target key (its keys named), or another form.
    """
    if isinstance(batch, Mapping):
        if rule.target not in batch:
            raise ValueError(
                f"{name}: a batch with keys {sorted(map(str, batch))} has no target "
                f"{rule.target!r} (BatchRule(target=...))"
            )
        inputs = {key: value for key, value in batch.items() if key != rule.target}
        return inputs, batch[rule.target]
    if isinstance(batch, tuple | list) and len(batch) == 2:
        return batch[0], batch[1]
    raise ValueError(
        f"{name}: a batch must be (x, y) or a mapping with the target {rule.target!r}, got "
        f"{type(batch).__name__}"
    )


def call(model: nn.Module, inputs: Inputs) -> Any:
    """``model(**inputs)`` for a mapping, ``model(inputs)`` otherwise."""
    return model(**inputs) if isinstance(inputs, Mapping) else model(inputs)


def prediction(output: Any, rule: BatchRule) -> torch.Tensor:
    """A tensor output as it is; ``output[rule.output]`` of a mapping (a ``ModelOutput``).

    Raises:
        ValueError: a mapping without that key (its keys named).
    """
    if isinstance(output, Mapping):
        if rule.output not in output:
            raise ValueError(
                f"the model's output has keys {sorted(map(str, output))}, no {rule.output!r} "
                "(BatchRule(output=...))"
            )
        return output[rule.output]
    return output


def predict(model: nn.Module, inputs: Inputs) -> torch.Tensor:
    """The prediction of ``model`` for ``inputs`` under its rule (module docstring)."""
    return prediction(call(model, inputs), batch_rule(model))


def apply(inputs: Inputs, function: Callable[[torch.Tensor], torch.Tensor]) -> Inputs:
    """``function`` of a tensor, or of every tensor of a mapping (a slice, a move to a
    device)."""
    if isinstance(inputs, Mapping):
        return {key: function(value) for key, value in inputs.items()}
    return function(inputs)


def take(inputs: Inputs, index: torch.Tensor | slice) -> Inputs:
    """The examples ``index`` of a tensor, or of every tensor of a mapping."""
    return apply(inputs, lambda values: values[index])


def rows(inputs: Inputs) -> int:
    """N, the examples of ``inputs`` (the first dimension; every tensor of a mapping's).

    Raises:
        ValueError: an empty mapping, or tensors with different numbers of examples.
    """
    if not isinstance(inputs, Mapping):
        return inputs.shape[0]
    counts = {key: value.shape[0] for key, value in inputs.items()}
    if len(set(counts.values())) != 1:
        raise ValueError(f"inputs: need one number of examples for every key, got {counts}")
    return next(iter(counts.values()))


def tokens(target: torch.Tensor, stacked: bool) -> bool:
    """Whether ``target`` holds a label per token, (N, T): a target of one network with more than
    one dimension (a stack's (M, N) are per-model labels per example)."""
    return not stacked and target.dim() >= 2


def examples(target: torch.Tensor, stacked: bool) -> int:
    """B, the examples of a batch's target: its last dimension, or for labels per token (N, T)
    its sequences N."""
    return target.shape[0] if tokens(target, stacked) else target.shape[-1]


def aligned(
    prediction: torch.Tensor, target: torch.Tensor, rule: BatchRule
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-token logits (N, T', C) and labels (N, T'): shifted by one for a causal model (the
    logits at t, the label at t + 1; T' = T - 1), else as they are (T' = T)."""
    if rule.causal:
        return prediction[:, :-1], target[:, 1:]
    return prediction, target


def example_log_prob(
    likelihood: Any,
    prediction: torch.Tensor,
    target: torch.Tensor,
    rule: BatchRule,
    stacked: bool = False,
) -> torch.Tensor:
    """log p(y_n | x_n) per example, (..., N): the likelihood's own for labels per example; for
    labels per token the sum over each sequence's tokens not labelled ``rule.ignore_index``
    (module docstring)."""
    if not tokens(target, stacked) or prediction.shape[: target.dim()] != target.shape:
        return likelihood.log_prob(prediction, target)  # its own shape checks
    logits, labels = aligned(prediction, target, rule)
    kept = labels != rule.ignore_index
    values = likelihood.log_prob(logits[kept], labels[kept])
    return values.new_zeros(labels.shape).masked_scatter(kept, values).sum(-1)


def example_accuracy(
    probabilities: torch.Tensor, target: torch.Tensor, rule: BatchRule, stacked: bool = False
) -> torch.Tensor:
    """Per example, 1.0 where argmax_c p(c | x_n) is y_n (float64); for labels per token, the
    share of the sequence's counted tokens predicted right."""
    if not tokens(target, stacked) or probabilities.shape[: target.dim()] != target.shape:
        return (probabilities.argmax(-1) == target).double()
    probabilities, labels = aligned(probabilities, target, rule)
    kept = labels != rule.ignore_index
    right = ((probabilities.argmax(-1) == labels) & kept).double().sum(-1)
    return right / kept.sum(-1).clamp(min=1)

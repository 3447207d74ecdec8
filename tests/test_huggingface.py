"""HuggingFace models as they come: tiny ``transformers`` models built from configs (nothing is
downloaded) through convert, train, sample, compare and diagnose, by the batch rule
(``vbnn.core.batch_rule``), with no wrapper.

The only warning filtered is vbnn's own: ``convert`` names the embeddings it leaves
deterministic (a ``UserWarning`` each test expects with ``pytest.warns``); building and calling
these models raises none.
"""

from __future__ import annotations

import math

import pytest
import torch
from torch.utils.data import DataLoader

import vbnn
from vbnn.core.batch_rule import (
    BatchRule,
    batch_rule,
    example_log_prob,
    prediction,
    split_batch,
)
from vbnn.core.randomness import ModelGenerators
from vbnn.layers.modes import as_input

transformers = pytest.importorskip("transformers")
from transformers.pytorch_utils import Conv1D  # noqa: E402

VOCABULARY, LENGTH = 50, 16
DETERMINISTIC = "convert: these modules hold parameters and stay deterministic"


def tiny_bert(seed: int = 0, labels: int = 2) -> torch.nn.Module:
    torch.manual_seed(seed)
    config = transformers.BertConfig(
        vocab_size=VOCABULARY,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=LENGTH,
        num_labels=labels,
    )
    return transformers.BertForSequenceClassification(config)


def tiny_gpt2(seed: int = 0, vocabulary: int = 20) -> torch.nn.Module:
    torch.manual_seed(seed)
    config = transformers.GPT2Config(
        vocab_size=vocabulary,
        n_embd=32,
        n_layer=2,
        n_head=2,
        n_positions=LENGTH,
        bos_token_id=0,
        eos_token_id=0,
    )
    return transformers.GPT2LMHeadModel(config)


def token_task(count: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Sequences of 16 tokens; the label says whether a sequence holds token 7 or 11."""
    ids = torch.randint(
        0, VOCABULARY, (count, LENGTH), generator=torch.Generator().manual_seed(seed)
    )
    return ids, ((ids == 7) | (ids == 11)).any(1).long()


def converted(model: torch.nn.Module) -> torch.nn.Module:
    with pytest.warns(UserWarning, match=DETERMINISTIC):
        return vbnn.convert(model, "mf")


def test_bert_trains_samples_and_is_diagnosed_from_its_own_batches() -> None:
    """A DataLoader of dicts trains the converted classifier to the rule; its mean network is
    the original's at conversion; samples cut into chunks are the samples of one pass."""
    ids, labels = token_task(1000, 0)
    test_ids, test_labels = token_task(200, 1)
    original = tiny_bert().eval()
    model = converted(original).eval()
    with torch.no_grad(), vbnn.mode(model, "mean"):
        mean_logits = model(input_ids=test_ids).logits
        torch.testing.assert_close(mean_logits, original(input_ids=test_ids).logits)
    records = [
        {"input_ids": i, "attention_mask": torch.ones_like(i), "labels": label}
        for i, label in zip(ids, labels, strict=True)
    ]
    loader = DataLoader(
        records, batch_size=100, shuffle=True, generator=torch.Generator().manual_seed(0)
    )
    network = vbnn.train(model, loader, epochs=3, learning_rate=1e-2, progress=False).network
    inputs = {"input_ids": test_ids}
    whole = vbnn.sample(network, inputs, 3, noise=ModelGenerators([5]))
    chunked = vbnn.sample(network, inputs, 3, batch_size=64, noise=ModelGenerators([5]))
    assert whole.shape == (3, 200, 2) and torch.equal(whole, chunked)
    report = vbnn.diagnose(network, inputs, test_labels, samples=4)
    with torch.no_grad(), vbnn.mode(network, "mean"):
        mean_right = (network(**inputs).logits.argmax(-1) == test_labels).double().mean()
    assert report.task == "classification" and report.examples == 200
    assert report.predictive["accuracy"]["mean"] == pytest.approx(float(mean_right), abs=1e-12)
    assert report.predictive["accuracy"]["ensemble"] >= 0.9  # chance: about 0.5


def test_ivon_trains_a_bert_from_a_mapping_of_tensors() -> None:
    ids, labels = token_task(100, 2)
    model = converted(tiny_bert())
    result = vbnn.train(
        model,
        {"input_ids": ids, "labels": labels},
        epochs=1,
        batch_size=50,
        optimizer="ivon",
        progress=False,
    )
    assert math.isfinite(result.history[0]["train_nll"])


def test_compare_takes_token_ids_as_a_pair_or_as_a_mapping() -> None:
    """Integer token ids stay integers; the pair (ids, labels) and the mapping of the same
    tensors train the same networks to the same scores."""
    ids, labels = token_task(100, 3)
    test_ids, test_labels = token_task(50, 4)
    settings = {"epochs": 2, "batch_size": 50, "learning_rate": 3e-3, "test_samples": 2}
    with pytest.warns(UserWarning, match=DETERMINISTIC):
        mapped = vbnn.compare(
            tiny_bert(),
            {"input_ids": ids, "labels": labels},
            test={"input_ids": test_ids, "labels": test_labels},
            families=["mf", "point"],
            **settings,
        )
    paired = vbnn.compare(
        tiny_bert(), (ids, labels), test=(test_ids, test_labels), families=["point"], **settings
    )
    scores = mapped.folds.set_index("family")
    assert set(scores.index) == {"mf", "point"}
    assert scores["log_likelihood"].map(math.isfinite).all()
    point = paired.folds.set_index("family").loc["point"]
    assert point["log_likelihood"] == scores.loc["point", "log_likelihood"]
    assert point["accuracy"] == scores.loc["point", "accuracy"]


def test_every_gpt2_conv1d_becomes_a_family_layer_with_its_function() -> None:
    """Conv1D's y = x W + b with W (in, out) is the family's dense layer with mean W^T: equal
    outputs layer by layer, and the converted GPT-2's mean logits are the original's."""
    original = tiny_gpt2().eval()
    model = converted(original).eval()
    layers = dict(model.named_modules())
    conv1d = {path: m for path, m in original.named_modules() if isinstance(m, Conv1D)}
    assert len(conv1d) == 8 and not any(isinstance(m, Conv1D) for m in model.modules())
    generator = torch.Generator().manual_seed(0)
    for path, layer in conv1d.items():
        assert isinstance(layers[path], vbnn.MeanField)
        h = torch.randn(3, 5, layer.weight.shape[0], generator=generator)
        assert torch.equal(layers[path](h, "mean"), layer(h))
    ids = torch.randint(0, 20, (4, LENGTH), generator=generator)
    with torch.no_grad(), vbnn.mode(model, "mean"):
        assert torch.equal(model(ids).logits, original(ids).logits)


@pytest.mark.parametrize("kind", ["causal", "tokens"])
def test_labels_per_token_give_huggingfaces_own_loss(kind: str) -> None:
    """Summed over the counted tokens of each sequence (shifted for a causal model, -100 left
    out), the batch rule's log-likelihood is minus HuggingFace's mean loss times the count."""
    generator = torch.Generator().manual_seed(1)
    if kind == "causal":
        model = tiny_gpt2().eval()
        ids = torch.randint(0, 20, (4, LENGTH), generator=generator)
        labels = ids.clone()
    else:
        torch.manual_seed(0)
        config = transformers.BertConfig(
            vocab_size=VOCABULARY,
            hidden_size=32,
            num_hidden_layers=1,
            num_attention_heads=2,
            intermediate_size=64,
            num_labels=3,
        )
        model = transformers.BertForTokenClassification(config).eval()
        ids = torch.randint(0, VOCABULARY, (4, LENGTH), generator=generator)
        labels = torch.randint(0, 3, (4, LENGTH), generator=generator)
    labels[0, 9:] = -100
    rule = batch_rule(model)
    assert rule.causal is (kind == "causal")
    with torch.no_grad():
        output = model(input_ids=ids, labels=labels)
        per_sequence = example_log_prob(vbnn.CategoricalLikelihood(), output.logits, labels, rule)
    counted = (labels[:, 1:] if rule.causal else labels) != -100
    assert per_sequence.shape == (4,)
    torch.testing.assert_close(-per_sequence.sum() / counted.sum(), output.loss)


def test_gpt2_learns_a_synthetic_language_as_a_causal_model() -> None:
    """The next token is 3 t + 1 mod 20 of the current one (the first drawn uniformly): the
    per-sequence NLL falls from about 15 log 20 to near 0 and the held-out tokens after the
    first are predicted."""
    generator = torch.Generator().manual_seed(0)

    def language(count: int) -> torch.Tensor:
        tokens = [torch.randint(0, 20, (count,), generator=generator)]
        for _ in range(LENGTH - 1):
            tokens.append((3 * tokens[-1] + 1) % 20)
        return torch.stack(tokens, 1)

    train, test = language(100), language(50)
    model = converted(tiny_gpt2())
    result = vbnn.train(
        model,
        {"input_ids": train, "labels": train},
        epochs=6,
        batch_size=20,
        learning_rate=1e-2,
        validation={"input_ids": test, "labels": test},
        progress=False,
    )
    first, last = result.history[0], result.history[-1]
    assert first["train_nll"] > 10.0 and last["train_nll"] < 0.2 * first["train_nll"]
    assert last["validation_accuracy"] >= 0.9


def test_the_rule_names_what_is_missing() -> None:
    """A mapping without the target, an output without the logits and a mapping for a stack of
    models are refused, naming the keys."""
    with pytest.raises(ValueError, match=r"keys \['input_ids', 'label'\] has no target 'labels'"):
        split_batch({"input_ids": torch.zeros(2, 3), "label": torch.zeros(2)}, BatchRule())
    assert split_batch({"ids": 1, "y": 2}, BatchRule(target="y")) == ({"ids": 1}, 2)
    model = torch.nn.Linear(3, 2)
    model.vbnn_batch_rule = BatchRule(output="scores")
    with pytest.raises(ValueError, match=r"output has keys \['logits'\], no 'scores'"):
        prediction({"logits": torch.zeros(1, 2)}, batch_rule(model))
    with pytest.raises(ValueError, match="a stack of 3 models takes tensor inputs"):
        as_input(3, {"input_ids": torch.zeros(2, 4)})

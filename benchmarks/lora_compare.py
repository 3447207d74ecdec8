"""``vbnn compare``'s adapter entries on a tiny BERT: test NLL, accuracy, ECE and training seconds.

    OMP_NUM_THREADS=1 python benchmarks/lora_compare.py --out benchmarks/results/lora_compare

The pretrained network is a BERT built from a small config (2 layers of width 32, 2 heads,
vocabulary 50, 16 positions; random weights, nothing downloaded) trained here in full by Adam
(``--pretrain-epochs`` epochs at 3e-3, batches of 100) on 2,000 sequences of 16 uniform token
ids to tell whether a sequence holds token 7 or token 11 (the task of docs/huggingface.md).
The downstream task moves one token: does it hold token 7 or token 13? ``vbnn.compare`` then
fine-tunes the pretrained network on ``--train`` sequences (1,000) and tests on 1,000 others,
with the entries ``lora``, ``lora-ensemble`` (3 members), ``mf-lora``, ``ivon-lora`` (adapters
of rank 4, alpha 8, on the attention's ``query`` and ``value`` projections, the classifier head
trainable) and ``point`` (every weight fine-tuned) beside them, ``--seeds`` seeds (2),
``--epochs`` epochs (10), Adam 1e-2 (IVON at its defaults), batches of 50, K = 20 test samples,
every other setting at ``compare``'s defaults (``lora``, the ensemble's members and ``point``
early-stopped on 10 % of the training sequences). The inputs are a mapping (``input_ids``,
``labels``), as a tokenizer gives them, so ``laplace-lora`` (tensor inputs only) does not run
here.

The runs go to ``OUT/lora_compare.sqlite`` (a re-run trains only what is missing) and the
medians over seeds to ``OUT/table.md``.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import pandas as pd
import torch

import vbnn
from vbnn.stores.atomic import write_atomic
from vbnn.stores.markdown import markdown_table

ENTRIES = ("lora", "lora-ensemble", "mf-lora", "ivon-lora", "point")
ADAPTER = vbnn.LoRA(rank=4, alpha=8.0, targets=("query", "value"), trainable=("classifier",))
LENGTH, VOCABULARY = 16, 50


def sequences(rows: int, seed: int, tokens: tuple[int, int]) -> dict[str, torch.Tensor]:
    """``rows`` sequences of uniform token ids, labelled 1 when one holds either of ``tokens``."""
    generator = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, VOCABULARY, (rows, LENGTH), generator=generator)
    labels = ((ids == tokens[0]) | (ids == tokens[1])).any(1).long()
    return {"input_ids": ids, "labels": labels}


def pretrained_bert(epochs: int) -> torch.nn.Module:
    """The tiny BERT trained in full on the pretraining task (module docstring)."""
    from transformers import BertConfig, BertForSequenceClassification

    torch.manual_seed(0)
    config = BertConfig(vocab_size=VOCABULARY, hidden_size=32, num_hidden_layers=2,
                        num_attention_heads=2, intermediate_size=64,
                        max_position_embeddings=LENGTH, num_labels=2)  # fmt: skip
    bert = BertForSequenceClassification(config)
    data = sequences(2000, 0, (7, 11))
    optimizer = torch.optim.Adam(bert.parameters(), lr=3e-3)
    bert.train()
    for _ in range(epochs):
        for batch in torch.randperm(2000, generator=torch.Generator().manual_seed(1)).split(100):
            optimizer.zero_grad()
            loss = bert(input_ids=data["input_ids"][batch], labels=data["labels"][batch]).loss
            loss.backward()
            optimizer.step()
    return bert.eval()


@torch.no_grad()
def accuracy(bert: torch.nn.Module, data: dict[str, torch.Tensor]) -> float:
    logits = bert(input_ids=data["input_ids"]).logits
    return float((logits.argmax(1) == data["labels"]).double().mean())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--seeds", type=int, default=2)
    parser.add_argument("--epochs", type=int, default=10)
    parser.add_argument("--pretrain-epochs", type=int, default=5)
    parser.add_argument("--train", type=int, default=1000)
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    bert = pretrained_bert(args.pretrain_epochs)
    pretraining = [accuracy(bert, sequences(1000, 3, tokens)) for tokens in ((7, 11), (7, 13))]
    result = vbnn.compare(
        bert,
        sequences(args.train, 2, (7, 13)),
        test=sequences(1000, 3, (7, 13)),
        families=list(ENTRIES),
        seeds=args.seeds,
        adapter=ADAPTER,
        epochs=args.epochs,
        batch_size=50,
        learning_rate=1e-2,
        ensemble_size=3,
        database=args.out / "lora_compare.sqlite",
    )
    folds = result.folds.assign(nll=-result.folds["log_likelihood"])
    table = folds.groupby("family")[["nll", "accuracy", "ece", "seconds"]].median()
    table = table.assign(seeds=folds.groupby("family").size()).reset_index()
    table.columns = ["family", "test NLL", "accuracy", "ECE", "train s", "seeds"]
    text = markdown_table(pd.DataFrame(table).round(3)) + (
        f"\n\nThe pretrained network's test accuracy: {pretraining[0]:.3f} on its own task, "
        f"{pretraining[1]:.3f} on the downstream task before fine-tuning."
    )
    write_atomic(args.out / "table.md", text + "\n")
    print(text)


if __name__ == "__main__":
    main()

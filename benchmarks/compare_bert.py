"""``vbnn compare`` on a HuggingFace BERT as it comes: every entry's test NLL, accuracy, ECE, AURC
and training seconds over seeds.

    OMP_NUM_THREADS=1 python benchmarks/compare_bert.py --out benchmarks/results/compare_bert

The network is ``BertForSequenceClassification`` from a small config (2 layers of width 32,
2 heads, vocabulary 50, 16 positions; random weights, nothing downloaded), given to
``vbnn.compare`` with no wrapper: the data are a mapping (``input_ids``, ``labels``) as a
tokenizer gives them. The task is that of docs/huggingface.md: does a sequence of 16 uniform
token ids hold token 7 or token 11 (1,000 training and 1,000 test sequences, seeded). Entries:
``mf`` (Adam on the ELBO), ``ivon`` at ``vbnn.IVON.for_attention()`` (the rule for attention
networks: ``--ivon defaults`` runs ``vbnn.IVON()`` instead), ``point``, ``ensemble``
(3 members), ``mc-dropout`` (BERT's own dropout layers), ``swag`` and ``point+ts``; ``--seeds``
seeds (3), ``--epochs`` epochs (10), Adam 1e-2, batches of 50, K = 10 test samples, every other
setting at ``compare``'s defaults. The embeddings stay deterministic (``vbnn.convert`` warns).

The runs go to ``OUT/compare_bert.sqlite`` as they finish (a re-run, or a run with more seeds,
trains only what is missing), the medians over seeds to ``OUT/table.md``.
"""

from __future__ import annotations

import argparse
import warnings
from pathlib import Path

import pandas as pd
import torch

import vbnn
from vbnn.stores.atomic import write_atomic
from vbnn.stores.markdown import markdown_table

ENTRIES = ("mf", "ivon", "point", "ensemble", "mc-dropout", "swag", "point+ts")
LENGTH, VOCABULARY = 16, 50


def sequences(rows: int, seed: int) -> dict[str, torch.Tensor]:
    """``rows`` sequences of uniform token ids, labelled 1 when one holds token 7 or 11."""
    generator = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, VOCABULARY, (rows, LENGTH), generator=generator)
    return {"input_ids": ids, "labels": ((ids == 7) | (ids == 11)).any(1).long()}


def bert() -> torch.nn.Module:
    """A tiny BERT classifier with fresh weights (called by compare under each seed)."""
    from transformers import BertConfig, BertForSequenceClassification

    config = BertConfig(
        vocab_size=VOCABULARY,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=LENGTH,
        num_labels=2,
    )
    return BertForSequenceClassification(config)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--epochs", type=int, default=10)
    parser.add_argument("--entries", default=",".join(ENTRIES))
    parser.add_argument("--ivon", choices=["attention", "defaults"], default="attention")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    ivon = vbnn.IVON.for_attention() if args.ivon == "attention" else vbnn.IVON()
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "convert: these modules hold parameters")
        result = vbnn.compare(
            bert,
            sequences(1000, 0),
            test=sequences(1000, 1),
            families=args.entries.split(","),
            seeds=args.seeds,
            epochs=args.epochs,
            learning_rate=1e-2,
            batch_size=50,
            test_samples=10,
            ensemble_size=3,
            ivon=ivon,
            database=args.out / "compare_bert.sqlite",
            progress=True,
        )
    columns = ["log_likelihood", "accuracy", "ece", "aurc", "seconds"]
    medians = result.folds.groupby("family", sort=False)[columns].median()
    medians.insert(0, "seeds", result.folds.groupby("family", sort=False).size())
    table = markdown_table(pd.DataFrame(medians).reset_index(), float_format="{:.3f}")
    write_atomic(args.out / "table.md", table + "\n")
    print(result.table.to_string())
    print(table)


if __name__ == "__main__":
    main()

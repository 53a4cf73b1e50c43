"""`data_handoff`: the trainer spends its step taking each batch over from its worker.

Each sample is a JSON record tokenized in Python (split, hash, pad: the worker holds its GIL
almost all the time) into a dict of tensors; the model is an embedding bag and a linear layer,
a fraction of a millisecond a step.  Under torch's default ``file_descriptor`` sharing, every
tensor of a batch reaches the trainer by a round trip to a thread in the worker, which answers
only when it gets the worker's GIL: the trainer waits in ``next()`` with the batch already made.
``--by-name`` shares the tensors through /dev/shm by name instead (the remedy), the control.
"""

from __future__ import annotations

import json
import random
import time

import torch
from common import parser, report, train
from torch.utils.data import DataLoader, Dataset

TOKENS, VOCAB, CLASSES = 32, 4096, 10
WORDS = [f"w{i}" for i in range(2000)]


class Records(Dataset):
    """JSON lines, tokenized per sample into ids, a mask and a length."""

    def __init__(self, count: int) -> None:
        rnd = random.Random(0)
        texts = (" ".join(rnd.choices(WORDS, k=rnd.randint(8, 40))) for _ in range(count))
        self.lines = [json.dumps({"text": t, "label": i % 10}) for i, t in enumerate(texts)]

    def __len__(self) -> int:
        return 1_000_000

    def __getitem__(self, index: int) -> tuple[dict[str, torch.Tensor], int]:
        record = json.loads(self.lines[index % len(self.lines)])
        words = record["text"].split()
        ids = [hash(w) % VOCAB for w in words][:TOKENS]
        ids += [0] * (TOKENS - len(ids))
        mask = [1.0 if i < len(words) else 0.0 for i in range(TOKENS)]
        sample = {"ids": torch.tensor(ids), "mask": torch.tensor(mask),
                  "length": torch.tensor(min(len(words), TOKENS))}  # fmt: skip
        return sample, record["label"]


class BagModel(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.bag = torch.nn.EmbeddingBag(VOCAB, 32, mode="sum")
        self.head = torch.nn.Linear(32, CLASSES)

    def forward(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        pooled = self.bag(batch["ids"], per_sample_weights=batch["mask"])
        return self.head(pooled / batch["length"].clamp(min=1).unsqueeze(1))


def main() -> None:
    args = parser(__doc__)
    args.add_argument("--by-name", action="store_true", help="share tensors by name (/dev/shm)")
    args.add_argument("--workers", type=int, default=1)
    opts = args.parse_args()
    if opts.by_name:
        torch.multiprocessing.set_sharing_strategy("file_system")
    torch.set_num_threads(1)
    loader = DataLoader(Records(4096), batch_size=16, num_workers=opts.workers,
                        persistent_workers=True)  # fmt: skip
    started = time.monotonic()
    report("data_handoff", train(loader, BagModel(), opts.seconds), started)


if __name__ == "__main__":
    main()

"""A word-level LSTM language model trained the way PyTorch's examples/word_language_model/main.py
does it, in its shape and defaults (batch 20, bptt 35, 200-wide 2-layer LSTM, dropout 0.2, clip
0.25, lr 20): batchified (sequence, batch) token tensors walked with ``get_batch``, the hidden
state cut with ``repackage_hidden``, hand-written SGD (``p.data.add_(p.grad, alpha=-lr)``), no
DataLoader, no optimizer.  Only the corpus is random tokens, and the epochs run until
$LOOP_SECONDS are up.
"""

import os
import sys

import torch
import torch.nn.functional as F
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from loop_clock import LoopClock

VOCAB, BATCH, BPTT, WIDTH, LAYERS, LR, CLIP = 2000, 20, 35, 200, 2, 20.0, 0.25


class RNNModel(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.drop = nn.Dropout(0.2)
        self.encoder = nn.Embedding(VOCAB, WIDTH)
        self.rnn = nn.LSTM(WIDTH, WIDTH, LAYERS, dropout=0.2)  # batch_first=False: (seq, batch)
        self.decoder = nn.Linear(WIDTH, VOCAB)

    def forward(self, data, hidden):
        output, hidden = self.rnn(self.drop(self.encoder(data)), hidden)
        decoded = self.decoder(self.drop(output)).view(-1, VOCAB)
        return F.log_softmax(decoded, dim=1), hidden

    def init_hidden(self, bsz):
        weight = next(self.parameters())
        return (weight.new_zeros(LAYERS, bsz, WIDTH), weight.new_zeros(LAYERS, bsz, WIDTH))


def batchify(data: torch.Tensor, bsz: int) -> torch.Tensor:
    rows = data.size(0) // bsz
    return data[: rows * bsz].view(bsz, -1).t().contiguous()


def get_batch(source: torch.Tensor, i: int) -> tuple[torch.Tensor, torch.Tensor]:
    seq_len = min(BPTT, len(source) - 1 - i)
    return source[i : i + seq_len], source[i + 1 : i + 1 + seq_len].view(-1)


def repackage_hidden(h):
    """Cut the graph at the batch boundary (truncated BPTT)."""
    return h.detach() if isinstance(h, torch.Tensor) else tuple(repackage_hidden(v) for v in h)


def train(model: RNNModel, train_data: torch.Tensor, clock: LoopClock) -> bool:
    """One epoch; False once the time is up."""
    model.train()
    criterion = nn.NLLLoss()
    hidden = model.init_hidden(BATCH)
    for i in range(0, train_data.size(0) - 1, BPTT):
        if not clock.running():
            return False
        clock.mark("data")
        data, targets = get_batch(train_data, i)
        clock.mark("forward")
        model.zero_grad()
        hidden = repackage_hidden(hidden)
        output, hidden = model(data, hidden)
        loss = criterion(output, targets)
        clock.mark("backward")
        loss.backward()
        clock.mark("update")
        torch.nn.utils.clip_grad_norm_(model.parameters(), CLIP)
        for p in model.parameters():
            p.data.add_(p.grad, alpha=-LR)
    return True


def main() -> None:
    torch.manual_seed(0)
    torch.set_num_threads(1)
    train_data = batchify(torch.randint(0, VOCAB, (30_000,)), BATCH)  # 1500 x 20: 43 batches
    model = RNNModel()
    clock = LoopClock(float(os.environ.get("LOOP_SECONDS", "4")))
    while train(model, train_data, clock):
        pass
    clock.report(batch=BATCH)
    with open("model.pt", "wb") as f:  # as the example does: the whole module, pickled
        torch.save(model, f)
    print(f"iterations={len(clock.starts)}")


if __name__ == "__main__":
    main()

"""traintop.module_samples with real torch modules, in-process: the outermost-module search, its
end, the rows it reports, and that nothing of it stays behind in torch or in a pickled model."""

from __future__ import annotations

import copy
import io
from collections.abc import Iterator

import pytest

from tests.test_probe import make_probe
from traintop.module_samples import ModelFinder

torch = pytest.importorskip("torch")


class Boundary:
    """Records what the finder reports (the StepBoundary API it uses)."""

    def __init__(self) -> None:
        self.rows: list[int] = []
        self.on_close = None

    def model_called(self, rows: int) -> None:
        self.rows.append(rows)


@pytest.fixture
def finder() -> Iterator[tuple[ModelFinder, Boundary]]:
    probe, _writers, _clock = make_probe()
    probe._auto = True
    boundary = Boundary()
    found = ModelFinder(probe, boundary, torch.nn.Module, torch.is_grad_enabled)
    plain = torch.nn.Module.__call__
    found.start()
    yield found, boundary
    found.settle()
    assert torch.nn.Module.__call__ is plain  # torch is left as it was found


class LM(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = torch.nn.Embedding(50, 8)
        self.rnn = torch.nn.LSTM(8, 8)  # (sequence, batch, ...)

    def forward(self, tokens):
        return self.rnn(self.embed(tokens))[0]


def test_outermost_module_rows_then_only_its_own_hook(finder) -> None:
    found, boundary = finder
    model, loss = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU()), torch.nn.MSELoss()
    with torch.no_grad():
        model(torch.zeros(99, 4))  # an evaluation pass: not the training forward
    out = model(torch.zeros(6, 4))
    loss(out, torch.zeros(6, 4))
    found.settle()  # what the first backward() does
    assert torch.nn.Module.__call__ is torch.nn.Module._wrapped_call_impl  # unwrapped
    model(torch.zeros(5, 4))
    assert boundary.rows == [6, 6, 5]  # the loss module is outermost too (its input: 6 rows)
    assert len(model[0]._forward_pre_hooks) == 0  # inner modules stay on torch's fast path


def test_sequence_first_models_report_the_batch_dimension(finder) -> None:
    _found, boundary = finder
    LM()(torch.zeros(35, 20, dtype=torch.long))
    assert boundary.rows == [20]


def test_an_inference_loop_ends_the_search_by_itself(finder) -> None:
    found, boundary = finder
    model = torch.nn.Linear(3, 1)
    for _ in range(100):
        model(torch.zeros(2, 3))
    assert not found.searching and len(boundary.rows) == 100


def test_the_hook_never_reaches_a_saved_or_copied_model(finder) -> None:
    found, _boundary = finder
    model = torch.nn.Linear(3, 1)
    model(torch.zeros(2, 3))
    found.settle()
    buffer = io.BytesIO()
    torch.save(model, buffer)  # the probe's objects cannot be pickled: this would raise
    assert b"traintop" not in buffer.getvalue()
    assert len(copy.deepcopy(model)._forward_pre_hooks) == 0
    assert len(model._forward_pre_hooks) == 1


def test_the_search_stops_when_the_explicit_api_is_used(finder) -> None:
    """probe.mark()/step() turn the hooks off: every module call must be torch's own again."""
    found, boundary = finder
    found._probe._auto = False
    torch.nn.Linear(3, 1)(torch.zeros(2, 3))
    assert not found.searching and boundary.rows == []

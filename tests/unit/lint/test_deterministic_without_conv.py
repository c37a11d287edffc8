"""GD503 and models without convolutions (twelfth held-out round: 15 of 20 GD503 findings were
bentrevett's seq2seq / sentiment notebooks, bag-of-words, GRU/LSTM and transformer models, which
set ``cudnn.deterministic = True`` for seeding). The flag only selects convolution algorithms, so
in a file whose models are its own and have no convolution it costs nothing and is not reported.
Anything that may bring a convolution keeps the rule on: a Conv layer or conv function in the
file, a model library, a whole-model loader, or a local import from a project that names one."""

from __future__ import annotations

from pathlib import Path

from gpudoctor.lint.config import LintConfig
from gpudoctor.lint.engine import lint_text
from gpudoctor.lint.registry import select_rules

SEQ2SEQ = """\
import random

import numpy as np
import torch
import torch.nn as nn
{extra_import}
seed = 1234
random.seed(seed)
np.random.seed(seed)
torch.manual_seed(seed)
torch.backends.cudnn.deterministic = True

device = torch.device("cuda" if torch.cuda.is_available() else "cpu")


class Encoder(nn.Module):
    def __init__(self, vocab, dim):
        super().__init__()
        self.embedding = nn.Embedding(vocab, dim)
        self.rnn = nn.LSTM(dim, dim, 2){extra_layer}

    def forward(self, src):
        return self.rnn(self.embedding(src))


model = Encoder(100, 32).to(device)
optimizer = torch.optim.Adam(model.parameters())
for src, trg in loader:
    optimizer.zero_grad()
    output, _ = model(src.to(device))
    loss = output.sum()
    loss.backward()
    optimizer.step()
"""


def _codes(folder: Path, source: str, name: str = "seq2seq.py") -> list[str]:
    path = folder / name
    path.write_text(source, encoding="utf-8")
    found = lint_text(source, str(path), select_rules(["GD503"]), LintConfig())
    return [v.code for v in found]


def _source(extra_import: str = "", extra_layer: str = "") -> str:
    return SEQ2SEQ.format(extra_import=extra_import, extra_layer=extra_layer)


def test_self_contained_rnn_model_with_deterministic_cudnn_is_not_reported(tmp_path: Path) -> None:
    assert _codes(tmp_path, _source()) == []


def test_a_conv_layer_in_the_file_is_still_reported(tmp_path: Path) -> None:
    layer = "\n        self.conv = nn.Conv1d(dim, dim, 3)"
    assert _codes(tmp_path, _source(extra_layer=layer)) == ["GD503"]


def test_a_functional_conv_is_still_reported(tmp_path: Path) -> None:
    layer = "\n        self.w = torch.nn.functional.conv2d"
    assert _codes(tmp_path, _source(extra_layer=layer)) == ["GD503"]


def test_a_model_library_import_is_still_reported(tmp_path: Path) -> None:
    assert _codes(tmp_path, _source(extra_import="import torchvision")) == ["GD503"]


def test_a_whole_model_from_the_hub_is_still_reported(tmp_path: Path) -> None:
    layer = "\n        self.backbone = torch.hub.load('pytorch/vision', 'resnet18')"
    assert _codes(tmp_path, _source(extra_layer=layer)) == ["GD503"]


def test_a_file_that_defines_no_model_is_still_reported(tmp_path: Path) -> None:
    source = "import torch\ntorch.backends.cudnn.deterministic = True\nfor x in loader:\n" \
             "    optimizer.zero_grad()\n    model(x).sum().backward()\n    optimizer.step()\n"
    assert _codes(tmp_path, source) == ["GD503"]


def test_a_local_import_from_a_project_with_convolutions_is_still_reported(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text("[project]\nname = 'x'\n", encoding="utf-8")
    (tmp_path / "blocks.py").write_text("import torch.nn as nn\nStem = nn.Conv2d\n", encoding="utf-8")
    assert _codes(tmp_path, _source(extra_import="from blocks import Stem")) == ["GD503"]


def test_a_local_import_from_a_project_without_convolutions_is_not_reported(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text("[project]\nname = 'x'\n", encoding="utf-8")
    (tmp_path / "vocab.py").write_text("def build(texts):\n    return {}\n", encoding="utf-8")
    assert _codes(tmp_path, _source(extra_import="from vocab import build")) == []


def test_use_deterministic_algorithms_is_still_reported_without_convolutions(tmp_path: Path) -> None:
    source = _source().replace("torch.backends.cudnn.deterministic = True",
                               "torch.use_deterministic_algorithms(True)")
    assert _codes(tmp_path, source) == ["GD503"]

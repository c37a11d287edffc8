"""The seed rules' negatives that depend on the whole file or on other files of the project
(a fixture's good.py cannot hold them without silencing its other cases)."""

from __future__ import annotations

from pathlib import Path

from gpudoctor.lint.engine import lint_paths, lint_source
from gpudoctor.lint.registry import select_rules

ACCUMULATE = (
    "import torch\nimport torch.nn as nn\nfrom torch.nn.parallel import DistributedDataParallel as DDP\n"
    "model = DDP(nn.Linear(3, 2).cuda())\ncriterion = nn.CrossEntropyLoss()\n"
    "for i, (x, y) in enumerate(loader):\n"
    "    loss = criterion(model(x), y)\n"
    "    loss.backward()\n"
    "    if (i + 1) % accum == 0:\n"
    "        optimizer.step()\n"
    "        optimizer.zero_grad()\n"
)


def _codes(source: str, *codes: str, path: str = "train.py") -> list[tuple[int, str]]:
    return [(v.line, v.code) for v in lint_source(source, path, select_rules(list(codes)))]


def test_accumulation_rules_fire_on_the_plain_loop() -> None:
    assert _codes(ACCUMULATE, "GD412", "GD603") == [(8, "GD412"), (8, "GD603")]


def test_rescaling_grad_by_hand_is_an_alternative_to_dividing_the_loss() -> None:
    source = ACCUMULATE.replace("        optimizer.step()\n",
                                "        for p in model.parameters():\n            p.grad /= accum\n"
                                "        optimizer.step()\n")
    assert _codes(source, "GD603") == []


def test_no_sync_or_require_backward_grad_sync_anywhere_silences_gd412_and_gd411() -> None:
    for marker in ("ctx = model.no_sync\n", "model.require_backward_grad_sync = False\n"):
        assert _codes(ACCUMULATE + marker, "GD412") == []
    reduced = ACCUMULATE + "for p in model.parameters():\n    torch.distributed.all_reduce(p.grad)\n"
    assert _codes(reduced, "GD411") == [(13, "GD411")]
    assert _codes(reduced + "ctx = model.no_sync\n", "GD411") == []


def test_gd205_leaves_pytest_files_alone() -> None:
    source = "import torch\nmodel = torch.nn.Linear(2, 2)\ndef test_forward(loader):\n    model.eval()\n" \
             "    for x in loader:\n        model(x)\n"
    assert _codes(source, "GD205", path="train.py") == [(6, "GD205")]
    assert _codes(source, "GD205", path="tests/test_model.py") == []


def test_gd105_reads_cv2_set_num_threads_from_another_file_of_the_project(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text("[project]\nname = 'p'\n", encoding="utf-8")
    data = tmp_path / "data.py"
    data.write_text(
        "import cv2\nfrom torch.utils.data import DataLoader, Dataset\n"
        "class Images(Dataset):\n    def __getitem__(self, i):\n        return cv2.imread(self.paths[i])\n"
        "loader = DataLoader(Images(), num_workers=8)\n", encoding="utf-8")
    assert [v.code for v in lint_paths([data], select=["GD105"]).violations] == ["GD105"]
    (tmp_path / "utils.py").write_text("import cv2\ncv2.setNumThreads(0)\n", encoding="utf-8")
    other = tmp_path / "data2.py"  # a fresh path: the project scan is cached per project and needle
    other.write_text(data.read_text(encoding="utf-8"), encoding="utf-8")
    from gpudoctor.lint import project

    project._tree_mentions.cache_clear()
    assert lint_paths([other], select=["GD105"]).violations == ()

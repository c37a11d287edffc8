"""The tenth held-out set (tests/fixtures/explain_heldout10, judged by
``benchmarks/explain_heldout.py --set explain_heldout10``): GitHub issue threads of mid-popularity
training projects (kohya_ss, timm, detectron2, mmdetection, yolov5, LLaVA, FastChat, NeMo, litgpt,
InternVL), taken in rank order per query (cases.toml says which queries and what was skipped), and the
general fixes it led to.

The fixes are tested on message forms other than the held-out logs, so they are not fitted to one
thread's wording.
"""

from __future__ import annotations

from .conftest import check_fresh_set


def test_the_set_is_27_issue_threads_none_from_earlier_rounds_or_a_catalog_sample() -> None:
    check_fresh_set("explain_heldout10", 27)

"""Static checks for GPU-training anti-patterns (``gpudoctor lint``). Standard-library ``ast`` only;
libcst is imported lazily by ``--fix``."""

from gpudoctor.lint.engine import discover, lint_paths, lint_source
from gpudoctor.lint.formats import FORMATS, render
from gpudoctor.lint.registry import ALL_RULES, RULES_BY_CODE, select_rules

__all__ = ["ALL_RULES", "FORMATS", "RULES_BY_CODE", "discover", "lint_paths", "lint_source", "render",
           "select_rules"]

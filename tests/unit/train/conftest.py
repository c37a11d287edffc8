"""Make ``helpers_train`` importable from the engine's tests (pytest runs in importlib mode)."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

"""Make the crafted-capture helpers importable as `craft`."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

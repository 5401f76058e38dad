import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

TRACES = Path(__file__).resolve().parents[2] / "shared" / "traces"

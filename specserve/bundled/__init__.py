"""Model folders shipped inside the package."""
from pathlib import Path

STDLIB_CODER = Path(__file__).resolve().parent / "stdlib-coder"

from pathlib import Path

import pytest

PLANETOID_DIR = Path(__file__).resolve().parents[2] / "shared" / "datasets" / "planetoid"


@pytest.fixture
def planetoid_dir() -> Path:
    if not (PLANETOID_DIR / "ind.cora.graph").is_file():
        pytest.skip(f"raw Planetoid Cora files not found at {PLANETOID_DIR}")
    return PLANETOID_DIR

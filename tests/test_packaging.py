"""Every package folder is listed for the wheel (an editable install would hide a missing one)."""

from __future__ import annotations

import tomllib
from pathlib import Path

ROOT = Path(__file__).parent.parent


def test_every_code_folder_is_a_listed_package_with_py_typed() -> None:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    mapping = config["package-dir"]
    found = set()
    for name, folder in mapping.items():
        for sub in [ROOT / folder, *(ROOT / folder).rglob("*")]:
            if sub.is_dir() and any(sub.glob("*.py")) and "__pycache__" not in sub.parts:
                found.add(".".join([name, *sub.relative_to(ROOT / folder).parts]))
        assert (ROOT / folder / "py.typed").exists(), folder
    assert found == set(config["packages"])

"""Every package folder is listed for the wheel (an editable install would hide a missing one),
and the installed package is where static checkers look for it."""

from __future__ import annotations

import importlib.machinery
import tomllib
from pathlib import Path

ROOT = Path(__file__).parent.parent
CONFIG = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]


def test_every_code_folder_is_a_listed_package_with_py_typed() -> None:
    mapping = CONFIG["package-dir"]
    found = set()
    for name, folder in mapping.items():
        for sub in [ROOT / folder, *(ROOT / folder).rglob("*")]:
            if sub.is_dir() and any(sub.glob("*.py")) and "__pycache__" not in sub.parts:
                found.add(".".join([name, *sub.relative_to(ROOT / folder).parts]))
        assert (ROOT / folder / "py.typed").exists(), folder
    assert found == set(CONFIG["packages"])


def _portions() -> list[Path]:
    """The folders of the `turnstile` namespace package found by looking in sys.path's folders
    alone, as mypy and other static checkers do: they read a .pth file's paths but never run
    its import hooks (the default editable install's way of mapping our folders)."""
    spec = importlib.machinery.PathFinder.find_spec("turnstile")
    found = spec.submodule_search_locations if spec is not None else None
    folders = [Path(p) for p in found or () if Path(p).is_dir()]  # not an import hook's name
    assert folders, (
        "no `turnstile` folder on sys.path: mypy cannot find the package. An editable install "
        "must make one (setup.cfg asks setuptools for its link tree)"
    )
    return folders


def test_static_checkers_find_every_module_of_the_installed_package() -> None:
    portions = _portions()
    missing = [
        f"{name}.{'.'.join(path.relative_to(ROOT / folder).with_suffix('').parts)}"
        for name, folder in CONFIG["package-dir"].items()
        for path in (ROOT / folder).rglob("*.py")
        if not any(
            (p / Path(*name.split(".")[1:]) / path.relative_to(ROOT / folder)).exists()
            for p in portions
        )
    ]
    assert missing == [], (
        "installed without these modules: the editable install links each file, so a module "
        "added since needs `pip install -e .` again"
    )

"""What an installed ecosim reads must be in its wheel: every data file under the package matches a
package-data pattern of pyproject.toml (a published row whose config.json is not shipped would not resolve)."""

from __future__ import annotations

import tomllib
from fnmatch import fnmatch

from conftest import ROOT


def test_every_data_file_of_the_package_is_shipped():
    patterns = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]["ecosim"]
    pkg = ROOT / "ecosim"
    data = [p.relative_to(pkg).as_posix() for p in pkg.rglob("*.json")]
    assert any(d.startswith("catalog/data/configs/") for d in data)  # the published rows' model configs
    missing = [d for d in data if not any(fnmatch(d, pat) and d.count("/") == pat.count("/") for pat in patterns)]
    assert not missing, f"not in [tool.setuptools.package-data]: {missing}"

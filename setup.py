"""Maps the repository's top-level folders onto the single import root ``envhub``.

The layout (docs/architecture.md, "The floors"): ``sandboxes/`` installs as ``envhub.sandboxes``
and so on, so that nothing we ship shadows PyPI's ``verifiers``, ``adapters`` or ``trainer``.
setuptools cannot discover such a mapping by itself, so the package list is derived here from the
folders.
"""

from pathlib import Path

from setuptools import setup

ROOT = Path(__file__).parent
SUBPACKAGES = ("sandboxes", "verifiers", "adapters", "trainer", "tasks")


def _packages(folder: str, root_name: str) -> dict[str, str]:
    found = {}
    for init in sorted((ROOT / folder).rglob("__init__.py")):
        rel = init.parent.relative_to(ROOT / folder)
        name = ".".join((root_name, *rel.parts)) if rel.parts else root_name
        found[name] = str(init.parent.relative_to(ROOT))
    return found


package_dir = _packages("envhub", "envhub")
for sub in SUBPACKAGES:
    package_dir.update(_packages(sub, f"envhub.{sub}"))

# Data folders without __init__.py (task corpora, manifests, templates) travel as package data.
package_data = {name: ["**/*"] for name in package_dir}

setup(
    packages=sorted(package_dir),
    package_dir=package_dir,
    package_data=package_data,
    include_package_data=True,
)

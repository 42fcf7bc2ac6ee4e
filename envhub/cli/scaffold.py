"""``envhub new-env NAME``: generate a task-family plugin package that passes its own suite.

Why a generator and not only a how-to: the contract between a family and envhub has several
parts that must agree (an ``envhub.envs`` entry point, a ``register_envs`` that registers the env
id, a task source with disjoint splits, terminal tool, verifier, gold solution and attacks). A
package that is correct out of the box -- ``envhub verify`` exits 0 right after ``pip install``
-- is the fastest way to a working family, and every later edit can be checked against that
green baseline. The templates live in ``envhub/cli/templates/new_env`` and use ``string.Template``
placeholders (``${package}``), which never collide with Python's braces.

See docs/new-env.md for the walk-through.
"""

from __future__ import annotations

import keyword
import re
from dataclasses import dataclass, field
from importlib.resources import files
from pathlib import Path
from string import Template
from typing import Annotated

import typer

#: template file -> path in the generated package ({package} is filled in)
LAYOUT = {
    "pyproject.toml.tmpl": "pyproject.toml",
    "README.md.tmpl": "README.md",
    "__init__.py.tmpl": "src/{package}/__init__.py",
    "env.py.tmpl": "src/{package}/env.py",
    "test_env.py.tmpl": "tests/test_{slug}.py",
}
DEFAULT_NAMESPACE = "plugin"
_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9]*(?:[-_ ][A-Za-z0-9]+)*$")
_NAMESPACE = re.compile(r"^[A-Za-z][\w.-]*$")


@dataclass(frozen=True)
class PluginNames:
    """Every spelling of one family name: ``word-count`` -> ``WordCount``, ``envhub_word_count``..."""

    name: str
    slug: str
    class_name: str
    package: str
    dist_name: str
    env_id: str

    @classmethod
    def from_name(cls, name: str, namespace: str = DEFAULT_NAMESPACE) -> PluginNames:
        if not _NAME.match(name):
            raise ValueError(f"invalid family name {name!r}: use letters and digits, words separated by - or _")
        if not _NAMESPACE.match(namespace):
            raise ValueError(f"invalid namespace {namespace!r}")
        words = [w.lower() for w in re.split(r"[-_ ]+|(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])", name) if w]
        slug = "_".join(words)
        if keyword.iskeyword(slug):
            raise ValueError(f"{name!r} is a Python keyword")
        class_name = "".join(w.capitalize() for w in words)
        return cls(name=name, slug=slug, class_name=class_name, package=f"envhub_{slug}",
                   dist_name="envhub-" + "-".join(words), env_id=f"{namespace}/{class_name}-v0")


@dataclass
class Scaffold:
    """What :func:`create_plugin` wrote."""

    root: Path
    names: PluginNames
    files: list[Path] = field(default_factory=list)


def create_plugin(name: str, directory: Path | str = ".", *, namespace: str = DEFAULT_NAMESPACE,
                  force: bool = False) -> Scaffold:
    """Write the plugin package ``<directory>/envhub-<name>/`` and return where everything went.

    Refuses to overwrite an existing folder unless ``force`` (then only the template files are
    rewritten; anything else in the folder is left alone).
    """
    names = PluginNames.from_name(name, namespace)
    root = Path(directory) / names.dist_name
    if root.exists() and any(root.iterdir()) and not force:
        raise FileExistsError(f"{root} exists and is not empty (use --force to overwrite the template files)")
    values = {k: getattr(names, k) for k in ("name", "slug", "class_name", "package", "dist_name", "env_id")}
    templates = files("envhub.cli") / "templates" / "new_env"
    scaffold = Scaffold(root=root, names=names)
    for template, target in LAYOUT.items():
        path = root / target.format(package=names.package, slug=names.slug)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(Template(templates.joinpath(template).read_text(encoding="utf-8")).substitute(values),
                        encoding="utf-8")
        scaffold.files.append(path)
    return scaffold


def new_env_command(
    name: Annotated[str, typer.Argument(help="family name, e.g. word-count (gives WordCount-v0)")],
    directory: Annotated[Path, typer.Option("--dir", help="folder to create the package in")] = Path("."),
    namespace: Annotated[str, typer.Option(help="env id namespace: <namespace>/<Name>-v0")] = DEFAULT_NAMESPACE,
    force: Annotated[bool, typer.Option(help="overwrite the template files of an existing package")] = False,
) -> None:
    """Generate a task-family plugin package (entry point, task source, tools, verifier, suite)."""
    try:
        scaffold = create_plugin(name, directory, namespace=namespace, force=force)
    except (ValueError, FileExistsError) as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None
    typer.echo(f"created {scaffold.root} ({scaffold.names.env_id}):")
    for path in scaffold.files:
        typer.echo(f"  {path.relative_to(scaffold.root)}")
    typer.echo("next:")
    typer.echo(f"  pip install -e {scaffold.root}")
    typer.echo(f"  envhub verify {scaffold.names.env_id}")
    typer.echo(f"  python -m pytest {scaffold.root / 'tests'}")

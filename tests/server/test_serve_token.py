"""``envhub serve`` reads its bearer token from a file or the environment: a ``--token`` on the
command line is readable by every process on the machine through /proc/PID/cmdline (issue 38)."""

from __future__ import annotations

from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from envhub.server.cli import CMDLINE_TOKEN_WARNING, read_token, serve_command

ENV_ID = "envhub/Computation-v0"


def test_the_token_comes_from_a_file_or_the_environment_without_a_warning(tmp_path: Path, capsys) -> None:
    path = tmp_path / "token"
    path.write_text("s3cret-from-file\nignored\n")
    assert read_token(None, path, None) == "s3cret-from-file"
    assert read_token("from-env", None, "from-env") == "from-env"
    assert read_token("from-env", path, "from-env") == "s3cret-from-file"
    assert read_token(None, None, None) is None
    assert CMDLINE_TOKEN_WARNING not in capsys.readouterr().err


def test_a_token_on_the_command_line_still_works_but_is_warned_about(capsys) -> None:
    assert read_token("typed", None, None) == "typed"
    assert CMDLINE_TOKEN_WARNING in capsys.readouterr().err


@pytest.mark.parametrize("content", ["", "\n", "   \nsecond line\n"])
def test_an_empty_or_unreadable_token_file_is_refused(tmp_path: Path, content: str) -> None:
    path = tmp_path / "token"
    path.write_text(content)
    with pytest.raises(typer.BadParameter, match="holds no token"):
        read_token(None, path, None)
    with pytest.raises(typer.BadParameter, match="cannot read"):
        read_token(None, tmp_path / "missing", None)
    path.write_text("a")
    with pytest.raises(typer.BadParameter, match="once"):
        read_token("typed", path, None)


def test_serve_names_the_token_file_when_a_public_host_has_no_token(tmp_path: Path) -> None:
    cli = typer.Typer()
    cli.command()(serve_command)
    result = CliRunner().invoke(cli, [ENV_ID, "--host", "0.0.0.0"], env={"ENVHUB_TOKEN": ""})
    assert result.exit_code == 2 and "--token-file" in result.output
    empty = tmp_path / "token"
    empty.write_text("")
    result = CliRunner().invoke(cli, [ENV_ID, "--host", "0.0.0.0", "--token-file", str(empty)],
                                env={"ENVHUB_TOKEN": ""})
    assert result.exit_code == 2 and "holds no token" in " ".join(result.output.replace("│", " ").split())

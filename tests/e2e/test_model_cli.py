"""`memtool model push|pull|diff|history` against a running local runtime, over HTTP."""

from __future__ import annotations

from importlib import resources

import pytest

from memtool.commands.model_remote import register
from memtool.runtime.local import LocalRuntime
from memtool.semantic.validation import line_of

from tests.support import ROOT

pytestmark = pytest.mark.slow

DEMO_YAML = resources.files("memtool.sql").joinpath("demo_model.yaml").read_text(encoding="utf-8")


def model_cli(*argv: str) -> int:
    import argparse

    parser = argparse.ArgumentParser(prog="memtool")
    model = parser.add_subparsers(dest="command", required=True).add_parser("model")
    register(model.add_subparsers(dest="model_command", required=True))
    args = parser.parse_args(["model", *argv])
    return int(args.func(args))


def test_push_pull_diff_history_and_a_refused_push_with_its_lines(tmp_path, capsys) -> None:
    model_file = tmp_path / "model.yaml"
    model_file.write_text(DEMO_YAML, encoding="utf-8")
    with LocalRuntime(home=tmp_path / "home", port=0, root=ROOT, warehouse_scale=0.05) as runtime:
        who = ["--url", runtime.api_url or "", "--tenant", "acme", "--user", "zhang", "--roles", "curator"]

        # push: version 1
        assert model_cli("push", str(model_file), *who) == 0
        assert "stored as version 1" in capsys.readouterr().out

        # pull writes YAML that diffs clean against the file
        pulled = tmp_path / "pulled.yaml"
        assert model_cli("pull", "-o", str(pulled), *who) == 0
        assert model_cli("diff", str(pulled), *who) == 0
        assert capsys.readouterr().out.startswith(f"no differences: {pulled} is stored v1")

        # an edited file differs (exit 1, a unified diff), and pushes as version 2 on version 1
        edited = tmp_path / "edited.yaml"
        edited.write_text(DEMO_YAML.replace("model_version: 2026.11.1", "model_version: 2026.12.1", 1), encoding="utf-8")
        assert model_cli("diff", str(edited), *who) == 1
        out = capsys.readouterr().out
        assert "-model_version: 2026.11.1" in out and "+model_version: 2026.12.1" in out
        assert model_cli("push", str(edited), *who) == 1  # no --expected-version: refused, with the hint
        assert "--expected-version 1" in capsys.readouterr().err
        assert model_cli("push", str(edited), "--expected-version", "1", *who) == 0
        capsys.readouterr()

        # a model that fails is refused with file:line: path: message, and version 2 stays
        lines = DEMO_YAML.splitlines(keepends=True)
        start = lines.index("metrics:\n")
        expression = next(n for n in range(start, len(lines)) if lines[n].lstrip().startswith("expression:"))
        indent = lines[expression][: len(lines[expression]) - len(lines[expression].lstrip())]
        lines[expression] = f"{indent}expression: SUM(ol.no_such_column)\n"
        broken = tmp_path / "broken.yaml"
        broken.write_text("".join(lines), encoding="utf-8")
        assert model_cli("push", str(broken), "--expected-version", "2", *who) == 1
        err = capsys.readouterr().err
        assert line_of("".join(lines), "metrics[0].expression") == expression + 1
        assert f"{broken}:{expression + 1}: metrics[0].expression: metrics[0] (gross_revenue): the warehouse refused it" in err

        # a YAML syntax error is reported at its line before anything is sent
        bad_yaml = tmp_path / "bad.yaml"
        bad_yaml.write_text("name: x\nmetrics: [unclosed\n", encoding="utf-8")
        assert model_cli("push", str(bad_yaml), *who) == 2
        assert f"{bad_yaml}:3: YAML syntax error" in capsys.readouterr().err

        # history lists both versions; a non-curator cannot push; no server: exit 2
        assert model_cli("history", *who) == 0
        history = capsys.readouterr().out.splitlines()
        assert [line.split("\t")[:2] for line in history] == [["v1", "2026.11.1"], ["v2", "2026.12.1"]]
        reader = ["--url", runtime.api_url or "", "--tenant", "acme", "--user", "li"]
        assert model_cli("push", str(edited), "--expected-version", "2", *reader) == 1
        assert "forbidden" in capsys.readouterr().err
    assert model_cli("history", *who) == 2
    assert "cannot reach the memtool API" in capsys.readouterr().err

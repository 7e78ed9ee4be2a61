"""`memtool maintain` over a local state folder: the flow runs from statemachines/, the counts are
printed per step, a failed start or a bad option is one line and its exit code."""

from __future__ import annotations

import pytest

from memtool.cli import main
from memtool.demo import ApiClient
from memtool.runtime.local import LocalRuntime

from tests.support import ROOT

pytestmark = pytest.mark.slow


def test_maintain_consolidates_what_the_runtime_stored_and_prints_the_counts(tmp_path, capsys):
    home = tmp_path / "home"
    with LocalRuntime(home=home, port=0, root=ROOT, warehouse_scale=0.05) as runtime:
        li = ApiClient(runtime.api_url, "acme", "li")
        for n in range(8):
            assert li.call("POST", "/memories", {"kind": "episodic", "content": f"Li asked for East China net revenue by channel (turn {n})"}).status == 201
        assert li.call("POST", "/memories", {"kind": "episodic", "content": "refund rate of the hospital channel"}).status == 201

    code = main(["maintain", "--home", str(home), "--step", "consolidate", "--tenant", "acme"])

    out = capsys.readouterr()
    assert code == 0, out.err
    lines = out.out.splitlines()
    consolidate = next(line for line in lines if line.startswith("consolidate"))
    assert "summaries 1" in consolidate and "consolidated 8" in consolidate, out.out
    assert lines[-1] == "1 tenant: acme"
    assert not any(line.startswith("decay") for line in lines)  # only the step asked for

    with LocalRuntime(home=home, port=0, root=ROOT, warehouse_scale=0.05) as runtime:
        active = ApiClient(runtime.api_url, "acme", "li").call("GET", "/memories?kind=episodic&status=active").body["items"]
        assert len(active) == 2 and sum("summary_of" in (m["value"] or {}) for m in active) == 1


def test_an_unknown_step_is_refused_by_the_parser(capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["maintain", "--step", "shrink"])
    assert exit_.value.code == 2
    assert "invalid choice: 'shrink'" in capsys.readouterr().err

"""The README stands alone and its figures match the code: a clone has nothing outside the
repository, so the README links nothing there; every setting, every stack parameter and the
guardrail attack count it states are checked against their sources."""

from __future__ import annotations

import re
from pathlib import Path

from memtool.runtime.template import load_template
from memtool.settings import Settings

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text(encoding="utf-8")


def section(title: str) -> str:
    start = README.index(f"## {title}")
    following = README.find("\n## ", start + 1)
    return README[start : following if following != -1 else None]


def test_the_readme_links_and_names_nothing_outside_the_repository() -> None:
    assert "../" not in README
    assert not re.search(r"\b(DESIGN|STYLE)\.md\b", README)
    for target in re.findall(r"\]\(([^)#]+)\)", README):  # markdown links to files must exist here
        if not target.startswith(("http://", "https://")):
            assert (ROOT / target).exists(), target


def test_every_setting_is_documented_in_the_configuration_table() -> None:
    table = section("Configuration")
    internal = {"lambda_function_name"}  # read from Lambda's own AWS_LAMBDA_FUNCTION_NAME
    missing = [name for name in Settings.model_fields if name not in internal and f"MEMTOOL_{name.upper()}" not in table]
    assert missing == []
    documented = set(re.findall(r"`(MEMTOOL_[A-Z0-9_]+)`", table))
    unknown = {variable for variable in documented if variable.removeprefix("MEMTOOL_").lower() not in Settings.model_fields}
    assert unknown == set()


def test_every_stack_parameter_is_in_the_deploy_table_with_its_default() -> None:
    parameters = load_template(ROOT / "template.yaml")["Parameters"]
    rows = {
        match.group(1): match.group(2)
        for match in re.finditer(r"^\| `(\w+)` \| ([^|]+) \|", section("Deploy to AWS"), re.M)
    }
    assert set(rows) == set(parameters)
    for name, spec in parameters.items():
        default = spec.get("Default")
        if default is None:
            assert rows[name].strip() == "(required)", name
        elif default == "":
            assert rows[name].strip() == "empty", name
        else:
            assert rows[name].strip() == f"`{default}`", name


def test_the_guardrail_attack_count_is_the_tests() -> None:
    from tests.unit.test_guardrails import ATTACKS

    (stated,) = re.findall(r"(\d+) attacks are in the tests", README)
    assert int(stated) == len(ATTACKS)

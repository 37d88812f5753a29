"""The console examples' parser and matcher (tests/docexamples.py), on small pages."""

from __future__ import annotations

from tests import docexamples as dx

PAGE = """# A page

```bash
launch +seed=7      # a recipe: no $, not an example
```

```
$ launch
...
[launch] run runs/20261123-193734-a61944 complete; seed=0 accuracy=0.6930 weights_sha256=e6a9b0f001fb38e9c8277cf9
$ launch compare runs/…-a61944 runs/20261123-193740-97b3f7
IDENTICAL: weights, 2 epochs' metrics and 9 traced steps are bitwise equal
```

```json
{"step": 0}
```
"""

RUN_LINE = "[launch] run runs/20261125-020410-c7d3be complete; seed=0 accuracy=0.7012 weights_sha256=" + "ab" * 12


def test_only_fenced_blocks_that_start_with_a_dollar_line_are_examples():
    (example,) = dx.extract(PAGE, "page.md")
    assert example.where == "page.md:7"
    assert [c.text for c in example.commands] == ["launch", "launch compare runs/…-a61944 runs/20261123-193740-97b3f7"]
    assert example.commands[0].expected[0] == "..." and example.commands[1].line == 11
    assert example.commands[1].expected == (
        "IDENTICAL: weights, 2 epochs' metrics and 9 traced steps are bitwise equal",
    )


def test_run_ids_digests_and_metrics_are_placeholders_bound_to_what_was_printed():
    (example,) = dx.extract(PAGE, "page.md")
    b = dx.match(example.commands[0].expected, ["Epoch 1/2", "32/32 - 3s", RUN_LINE], dx.Bindings())
    assert b is not None
    assert b.runs == {"a61944": "20261125-020410-c7d3be"}
    assert b.values["0.6930"] == "0.7012" and b.values["e6a9b0f001fb38e9c8277cf9"] == "ab" * 12
    # the documented ids in the next command become the real ones (those bound so far)
    assert dx.substitute_runs(example.commands[1].text, b) == (
        "launch compare runs/20261125-020410-c7d3be runs/20261123-193740-97b3f7"
    )


def test_a_different_line_does_not_match():
    expected = ["IDENTICAL: weights, 2 epochs' metrics and 9 traced steps are bitwise equal"]
    assert (
        dx.match(
            expected, ["IDENTICAL: weights, 2 epochs' metrics and 8 traced steps are bitwise equal"], dx.Bindings()
        )
        is None
    )
    assert dx.match(expected, [expected[0], "and one more line"], dx.Bindings()) is None
    assert dx.match(expected, [], dx.Bindings()) is None
    assert dx.match(["..."], [], dx.Bindings()) is not None  # "..." is any number of lines, none too


def test_a_placeholder_must_stand_for_the_same_value_everywhere():
    line = "[launch] run runs/20261123-193734-a61944 complete; accuracy=0.6930 weights_sha256=" + "e6" * 32
    b = dx.match([line], [line.replace("0.6930", "0.7000")], dx.Bindings())
    assert b is not None
    # the same documented metric printed as another value: a mismatch
    assert dx.match(["mean 0.6930"], ["mean 0.7001"], b) is None
    assert dx.match(["mean 0.6930"], ["mean 0.7000"], b) is not None
    # a 16-digit prefix of the documented digest must be a prefix of the printed one
    assert dx.match(["000 " + "e6" * 8], ["000 " + "e6" * 8], b) is not None
    assert dx.match(["000 " + "e6" * 8], ["000 " + "ff" * 8], b) is None
    # the same documented run is the same real run; two documented runs are two real runs
    assert dx.match(["runs/…-a61944"], ["runs/20261123-193734-a61944"], b) is not None
    assert dx.match(["runs/…-a61944"], ["runs/20261125-000000-000000"], b) is None
    assert dx.match(["runs/20261123-193740-97b3f7"], ["runs/20261123-193734-a61944"], b) is None


def test_elisions_durations_and_table_padding():
    assert dx.match(["REPRODUCED: …"], ["REPRODUCED: replay /x of /y"], dx.Bindings()) is not None
    assert dx.match(["3/3 - 2s - 530ms/step"], ["3/3 - 11s - 1.2s/step"], dx.Bindings()) is not None
    assert dx.match(["3/3 - 2s - 530ms/step"], ["4/4 - 2s - 530ms/step"], dx.Bindings()) is None
    assert dx.match(["(32,)  2.56e-09  yes"], ["(32,)  1.4e-09  yes"], dx.Bindings()) is not None
    assert dx.match(["difference 2.38e-07; 0 out"], ["difference 0; 0 out"], dx.Bindings()) is not None
    assert dx.match(["difference 2.38e-07; 0 out"], ["difference 0; 1 out"], dx.Bindings()) is None
    table = ["| main         | pkg://launcher.configs    |", "-------------"]
    assert dx.match(table, ["| main | pkg://launcher.configs |", "---"], dx.Bindings()) is not None
    assert dx.match(table, ["| main | pkg://launcher.config |", "---"], dx.Bindings()) is None
    assert dx.match(["a  b", "", "c"], ["a b   ", "c", ""], dx.Bindings()) is not None  # blank lines, trailing spaces


def test_a_mismatch_is_explained_by_its_first_differing_line():
    text = dx.first_difference(["one", "two"], ["one", "three"], dx.Bindings())
    assert "line 2 differs" in text and "documented: two" in text and "printed:    three" in text

"""What `inferd quantize` says of each figure: the bound it is judged by, or why it is not."""

from __future__ import annotations

from inferd.prep.accuracy import Accuracy
from inferd.prep.quantize_verdict import Thresholds, describe_diff, verdict


def test_an_embeddings_raw_diff_says_it_is_not_judged_and_against_what_range() -> None:
    accuracy = Accuracy(
        max_abs={"last_hidden_state": 6.36},
        value_range={"last_hidden_state": 24.0},
        cosines=[0.993, 0.988],
    )
    said = describe_diff("last_hidden_state", 6.36, accuracy, Thresholds())
    assert said == (
        "6.36 (26.5% of the output's range 24); not judged: the embeddings are judged by "
        "their cosine (above)"
    )
    assert verdict(accuracy, Thresholds()) == []


def test_a_classifiers_raw_diff_points_to_its_labels() -> None:
    accuracy = Accuracy(max_abs={"logits": 0.4}, value_range={"logits": 8.0}, agreements=[True])
    assert "judged by its label agreement" in describe_diff("logits", 0.4, accuracy, Thresholds())


def test_another_models_diff_is_within_or_over_its_bound() -> None:
    accuracy = Accuracy(max_abs={"y": 0.2}, value_range={"y": 10.0})
    assert describe_diff("y", 0.2, accuracy, Thresholds()).endswith(
        "; within the bound 0.5 (5% of the range)"
    )
    strict = Thresholds(max_abs_diff=0.1)
    assert describe_diff("y", 0.2, accuracy, strict).endswith(
        "; OVER the bound 0.1 (--max-abs-diff)"
    )
    assert verdict(accuracy, strict) == ["y: max |diff| 0.2 > 0.1 (--max-abs-diff)"]

"""Per-document text statistics written by ExampleGen (and constrained by the curated schema)."""

import pytest

from components.example_gen.text_profile import BLANK, GARBLED, PROSE, SYMBOLIC, profile_text


def test_fractions_count_letters_of_any_script_digits_and_whitespace():
    profile = profile_text("ab 12 Zoë 你好!")
    assert profile.num_chars == 13
    assert profile.letter_fraction == pytest.approx(7 / 13)  # a b Z o ë 你 好
    assert profile.digit_fraction == pytest.approx(2 / 13)
    assert profile.whitespace_fraction == pytest.approx(3 / 13)
    assert profile.content_class == PROSE


@pytest.mark.parametrize(
    "text, expected",
    [
        ("Thanks for writing, we will fix it.", PROSE),
        ("谢谢您的来信，我们会尽快处理。", PROSE),
        ("", BLANK),
        (" \n\t  ", BLANK),
        ("| 12 | 34.5 | 0x1F | -- | ++ |", SYMBOLIC),
        ("Thanks \ufffd for writing", GARBLED),  # 1 of 20 characters is U+FFFD
        ("A long reply " * 20 + "\ufffd", PROSE),  # one repaired byte in 261 characters is not garbled
    ],
)
def test_content_class(text, expected):
    assert profile_text(text).content_class == expected


def test_features_for_the_example_are_floats_in_the_unit_interval():
    features = profile_text("Hello, world 42").float_features()
    assert set(features) == {"letter_fraction", "digit_fraction", "whitespace_fraction"}
    assert all(0.0 <= value <= 1.0 for value in features.values())

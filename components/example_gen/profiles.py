"""Cleaning profiles: which quality rules are on, and with which thresholds, unless the user sets a
rule's option explicitly (`cleaning.quality.<rule option>`; an explicit value always wins).

    web      every Gopher / C4 / FineWeb quality rule at its published threshold (the
             `QualityOptions` field defaults): for crawled web text, what the rules were tuned on.
    curated  (the default) only the rules that catch garbage in any corpus a team chose on
             purpose: 'lorem ipsum' placeholders, symbol soup (almost no word has a letter), and
             extreme repetition (most of a document's characters in repeated lines, or one word
             pair taking half of its characters). Poems, support replies, source code, dialogue and
             text written without spaces keep their documents. Normalisation, PII scrubbing,
             decontamination, the toxicity filter and exact/near dedup have their own switches and
             are not part of a profile.
    off      no quality rule at all (the other steps still follow their own switches).

Pure data, no imports from the options module (which applies it, see
`CleaningOptions._profile_sets_rule_defaults`), so it reads as the table it is.
"""

from typing import Any, Dict

WEB, CURATED, OFF = "web", "curated", "off"
DEFAULT_PROFILE = CURATED

# The `QualityOptions` values each profile gives the options the user did not set. `web` changes
# nothing: its values are the field defaults. A threshold of 0 turns its rule off.
_CURATED: Dict[str, Any] = {
    "min_words": 0,
    "max_words": 0,
    "min_mean_word_length": 0.0,
    "max_mean_word_length": 0.0,
    "max_symbol_word_ratio": 0.0,
    "max_bullet_lines_fraction": 0.0,
    "max_ellipsis_lines_fraction": 0.0,
    "min_stop_words": 0,
    "min_punctuated_lines_fraction": 0.0,
    "max_short_lines_fraction": 0.0,
    "max_duplicate_lines_fraction": 0.0,
    "max_duplicate_paragraphs_fraction": 0.0,
    "max_duplicate_paragraph_chars_fraction": 0.0,
    "max_top_3gram_chars_fraction": 0.0,
    "max_top_4gram_chars_fraction": 0.0,
    "max_duplicate_5gram_chars_fraction": 0.0,
    "max_duplicate_10gram_chars_fraction": 0.0,
    # Garbage in any corpus. Lenient on purpose: source code has many symbol tokens and songs
    # have refrains, so only text that is mostly symbols or mostly repeats is removed.
    "reject_lorem_ipsum": True,
    "min_alpha_words_fraction": 0.25,  # symbol soup: fewer than 1 in 4 tokens has a letter
    "max_duplicate_line_chars_fraction": 0.6,  # extreme repetition: most characters in repeated lines
    "max_top_2gram_chars_fraction": 0.5,  # extreme repetition: "buy now buy now buy now ..."
}
PROFILES: Dict[str, Dict[str, Any]] = {WEB: {}, CURATED: _CURATED, OFF: {"enabled": False}}


def quality_defaults(profile: str) -> Dict[str, Any]:
    """The `QualityOptions` values `profile` sets where the user set none (a copy)."""
    if profile not in PROFILES:
        raise ValueError(f"unknown cleaning profile {profile!r} (expected one of {', '.join(PROFILES)})")
    return dict(PROFILES[profile])

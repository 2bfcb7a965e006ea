"""Decoding one record's bytes under the configured invalid-UTF-8 policy."""

from typing import Optional, Tuple

from components.example_gen.records import INVALID_UTF8_REPLACED, CorpusError


def decode_utf8(raw: bytes, policy: str, location: str) -> Tuple[Optional[str], Tuple[str, ...]]:
    """Returns (text, repairs). Under policy 'skip' the text is None for invalid bytes (the
    caller quarantines the record); 'replace' substitutes U+FFFD and names the repair; 'fail'
    raises CorpusError with the location and byte offset."""
    try:
        return raw.decode("utf-8"), ()
    except UnicodeDecodeError as exc:
        if policy == "replace":
            return raw.decode("utf-8", errors="replace"), (INVALID_UTF8_REPLACED,)
        if policy == "skip":
            return None, ()
        raise CorpusError(f"{location}: invalid UTF-8 at byte {exc.start} of the record ({exc.reason})") from None


def ensure_encodable(text: str, policy: str, location: str) -> Tuple[Optional[str], Tuple[str, ...]]:
    """Like `decode_utf8` for text that came out of a parser (JSON `\\ud800` escapes can yield lone
    surrogates, which cannot be written as UTF-8)."""
    try:
        text.encode("utf-8")
        return text, ()
    except UnicodeEncodeError:
        return decode_utf8(text.encode("utf-8", errors="surrogatepass"), policy, location)

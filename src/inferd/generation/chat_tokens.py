"""Tokenizing a rendered chat prompt so that message content cannot act as control tokens.

A chat template writes the turns' control tokens (`<|system|>`, `<|assistant|>`, the end of
text) around each message's content. Tokenized as one string, a user's content holding those
same strings would become the same control tokens: a turn the user opens as the system, or an
end of text in the middle of the prompt. Here the control tokens the template writes are
split out and kept; everything else, the content included, is tokenized with the tokenizer's
special tokens read as plain text (the tokenizers library's `encode_special_tokens`). The
template's own text and the content around each control token are tokenized together, as the
tokenizer itself would (it splits at special tokens first), so a prompt without such strings in
its content gets exactly the ids it always had.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from tokenizers import Encoding, Tokenizer

Part = tuple[str, bool]
"""A piece of a rendered prompt, and whether it is a message's content (else the template's)."""


class ChatEncoder:
    """Ids of a rendered chat prompt, its content's special tokens taken as text."""

    def __init__(self, tokenizer: Tokenizer) -> None:
        self._tokenizer = tokenizer
        # a copy reading special tokens as text: the flag is the tokenizer's state, and the
        # original is used meanwhile (on the loop and on worker threads)
        self._plain = Tokenizer.from_str(tokenizer.to_str())
        self._plain.encode_special_tokens = True
        specials = sorted(
            (t.content for t in tokenizer.get_added_tokens_decoder().values() if t.special),
            key=len,
            reverse=True,
        )
        self._specials = re.compile("|".join(map(re.escape, specials))) if specials else None

    def encode(self, parts: Sequence[Part]) -> list[int]:
        """The ids of the parts joined, as `tokenizer.encode` gives them (its post-processor
        included), except that special tokens inside content are text."""
        encodings: list[Encoding] = []
        plain = ""
        for text, content in parts:
            if content or self._specials is None:
                plain += text
                continue
            at = 0
            for match in self._specials.finditer(text):
                plain += text[at : match.start()]
                if plain:
                    encodings.append(self._plain.encode(plain, add_special_tokens=False))
                    plain = ""
                encodings.append(self._tokenizer.encode(match.group(), add_special_tokens=False))
                at = match.end()
            plain += text[at:]
        if plain:
            encodings.append(self._plain.encode(plain, add_special_tokens=False))
        if not encodings:
            return list(self._tokenizer.encode("").ids)
        merged = Encoding.merge(encodings, growing_offsets=True)
        return list(self._tokenizer.post_process(merged).ids)

"""Texts to token feeds with the Hugging Face `tokenizers` library, checked before queueing.

Each text becomes its own one-row item (`input_ids`, `attention_mask`, ... of shape [1, n]) so
that the batcher can group texts of similar length, whichever request they came from.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from tokenizers import Encoding, Tokenizer

from inferd.config.model import TokenizerConfig
from inferd.errors import (
    EmptyInputError,
    EncodingError,
    InferdError,
    InputTooLongError,
    TooManyItemsError,
)
from inferd.runtime.protocol import Array

BULK = 8
"""From this many texts on, tokenize with the library's parallel batch encoder."""


CHARS_PER_TOKEN = 128
"""With truncation on, a text is cut to max_tokens x this many characters before it is
tokenized: a token spans fewer (WordPiece gives up on words over 100 characters), so the tokens
kept are the same, and a 100k-character text costs what its first tokens cost."""

OFF_LOOP_CHARS = 16_384
"""Requests with more characters than this are tokenized on a worker thread (the Rust
tokenizer releases the GIL), so a large legal request never stalls the event loop (about 4 ms
of it here: tokenizing takes 0.25-0.35 us a character)."""
BUSY_OFF_LOOP_CHARS = 1_024
"""While the server holds other requests, from this many characters on (about 0.3 ms of
tokenizing) a request is tokenized on a worker thread: the hop costs the loop less (about
0.08 ms), and the loop is what bounds a busy server whose runtime is fast (a GPU's). Alone,
a request is tokenized inline up to `OFF_LOOP_CHARS`: nothing else waits for the loop, and
the hop would only add to its latency."""


class TokenizerError(ValueError):
    """The tokenizer file is missing or unusable (a load-time problem, not a client's)."""


def find_tokenizer(config: TokenizerConfig, version_folder: Path, model_folder: Path) -> Path:
    for folder in (version_folder, model_folder):
        candidate = folder / config.file
        if candidate.is_file():
            return candidate
    raise TokenizerError(
        f"no {config.file} in the version folder or the model folder; a text model serves "
        "with the tokenizer exported beside it"
    )


Span = tuple[int, int] | None
"""Where a token lies in its text (start and end, in characters); None for a special token."""


@dataclass(frozen=True)
class EncodedTexts:
    items: list[dict[str, Array]]
    token_counts: list[int]
    spans: list[list[Span]] | None = None
    """Each text's tokens' spans, when asked for (`TextEncoder.encode(spans=True)`)."""


class TextEncoder:
    """Validates and tokenizes texts; one instance per served version, used on the event loop."""

    def __init__(self, path: Path, config: TokenizerConfig, max_texts: int) -> None:
        try:
            tokenizer = Tokenizer.from_file(str(path))
        except Exception as exc:  # tokenizers raises a plain Exception for a bad file
            raise TokenizerError(f"cannot read tokenizer {path.name}: {exc}") from exc
        self.pad_id = _pad_id(tokenizer)
        tokenizer.no_padding()  # the batcher pads, per batch, to the batch's longest text
        if config.truncate:
            tokenizer.enable_truncation(config.max_tokens)
        else:
            tokenizer.no_truncation()
        self._tokenizer = tokenizer
        # without the offsets of each token, which nothing here reads: a fifth less of the
        # tokenizer's time (tokenizers 0.21 and later)
        self._encode_batch = getattr(tokenizer, "encode_batch_fast", tokenizer.encode_batch)
        self._config = config
        self._max_texts = max_texts

    @property
    def config(self) -> TokenizerConfig:
        return self._config

    def pad_values(self) -> dict[str, float]:
        """The value each token input is padded with when texts share a batch."""
        config = self._config
        values = {config.input_ids: float(self.pad_id)}
        for name in (config.attention_mask, config.token_type_ids):
            if name is not None:
                values[name] = 0.0
        return values

    def check(self, texts: Sequence[str]) -> None:
        """4001 for no text or a blank one, 4005 for too many, 4002 over the character limit,
        4003 for unpaired surrogates; each message names the index of the offending text."""
        if not texts:
            raise EmptyInputError("no text given: send at least one")
        if len(texts) > self._max_texts:
            raise TooManyItemsError(
                f"{len(texts)} texts in one request; the limit is {self._max_texts}"
            )
        total = sum(len(t) for t in texts if isinstance(t, str))
        if total > self._config.max_request_chars:
            raise InputTooLongError(
                f"the texts have {total} characters together; the limit is "
                f"{self._config.max_request_chars} a request"
            )
        limit = self._config.max_chars
        for index, text in enumerate(texts):
            if not text or text.isspace():
                raise EmptyInputError(f"text {index} is empty or only whitespace")
            if len(text) > limit:
                raise InputTooLongError(
                    f"text {index} has {len(text)} characters; the limit is {limit}"
                )
            try:
                text.encode("utf-8")
            except UnicodeEncodeError:
                raise EncodingError(f"text {index} holds an unpaired surrogate") from None

    def heavy(self, texts: Sequence[str], quiet: bool = True) -> bool:
        """Whether tokenizing `texts` takes long enough to belong off the event loop; `quiet`:
        the server holds no other request (`BUSY_OFF_LOOP_CHARS`)."""
        chars = sum(len(t) for t in texts)
        return chars > OFF_LOOP_CHARS or (not quiet and chars > BUSY_OFF_LOOP_CHARS)

    def encode(self, texts: Sequence[str], spans: bool = False) -> EncodedTexts:
        """One item per text; with `spans`, where each token lies in its text too."""
        self.check(texts)
        texts = self._cut(texts)
        if len(texts) < BULK:  # few texts: the parallel batch path costs more than it saves
            encodings = [self._tokenizer.encode(text) for text in texts]
        elif spans:
            encodings = self._tokenizer.encode_batch(list(texts))
        else:
            encodings = self._encode_batch(list(texts))
        encoded = self._items(encodings, pairs=False)
        if not spans:
            return encoded
        return EncodedTexts(encoded.items, encoded.token_counts, [_spans(e) for e in encodings])

    def encode_pairs(self, query: str, texts: Sequence[str]) -> EncodedTexts:
        """One item per (query, text) pair, in the tokenizer's pair form (`[CLS] query [SEP]
        text [SEP]`, segment ids 0 then 1), as a cross-encoder takes them; truncation takes
        from the longer of the two first, as Hugging Face's `longest_first`."""
        self.check(texts)
        try:
            self.check([query])
        except InferdError as exc:
            raise type(exc)(exc.message.replace("text 0", "the query")) from None
        query, *cut = self._cut([query, *texts])
        pairs = [(query, text) for text in cut]
        if len(pairs) < BULK:
            encodings = [self._tokenizer.encode(q, t) for q, t in pairs]
        else:
            encodings = self._encode_batch(pairs)
        return self._items(encodings, pairs=True)

    def _cut(self, texts: Sequence[str]) -> list[str]:
        """With truncation on, never tokenize what it drops (bounded, see CHARS_PER_TOKEN)."""
        if not self._config.truncate:
            return list(texts)
        cut = self._config.max_tokens * CHARS_PER_TOKEN
        return [t[:cut] if len(t) > cut else t for t in texts]

    def _items(self, encodings: Sequence[Encoding], pairs: bool) -> EncodedTexts:
        config = self._config
        items = []
        counts = []
        for index, encoding in enumerate(encodings):
            n = len(encoding.ids)
            if not config.truncate and n > config.max_tokens:
                raise InputTooLongError(
                    f"text {index} has {n} tokens; the limit is {config.max_tokens} "
                    "(truncation is off for this model)"
                )
            ids = np.asarray(encoding.ids, dtype=np.int64).reshape(1, n)
            item: dict[str, Array] = {config.input_ids: ids}
            if config.attention_mask is not None:
                item[config.attention_mask] = np.ones((1, n), dtype=np.int64)
            if config.token_type_ids is not None:
                item[config.token_type_ids] = (
                    np.asarray(encoding.type_ids, dtype=np.int64).reshape(1, n)
                    if pairs
                    else np.zeros((1, n), dtype=np.int64)
                )
            items.append(item)
            counts.append(n)
        return EncodedTexts(items, counts)


def _spans(encoding: Encoding) -> list[Span]:
    return [
        None if special else (start, end)
        for (start, end), special in zip(
            encoding.offsets, encoding.special_tokens_mask, strict=True
        )
    ]


def _pad_id(tokenizer: Tokenizer) -> int:
    padding = tokenizer.padding
    if padding and padding.get("pad_id") is not None:
        return int(padding["pad_id"])
    for token in ("[PAD]", "<pad>", "<|padding|>"):
        found = tokenizer.token_to_id(token)
        if found is not None:
            return int(found)
    return 0

"""Token ids to text as they are generated: the text grows by deltas, never emits half of a
multi-byte character, and holds back what could be the start of a stop sequence until it
knows; a stop sequence ends the text before it.

Each new token decodes only a short window of recent tokens (the way text-generation-inference
does it), so the cost per token does not grow with the length of the output; tokens appended
together (`append`, then `advance`) are decoded together."""

from __future__ import annotations

from tokenizers import Tokenizer

REPLACEMENT = "\ufffd"


class IncrementalText:
    def __init__(self, tokenizer: Tokenizer, stop: tuple[str, ...]) -> None:
        self._tokenizer = tokenizer
        self._stop = stop
        self._ids: list[int] = []
        self._prefix = 0  # window start: tokens before it are in `decoded` for good
        self._read = 0  # tokens up to here are in `decoded`
        self._seen = 0  # tokens up to here have been decoded at least once
        self._decoded = ""
        self.text = ""
        """All text decoded so far (a stop sequence and what follows it cut off)."""
        self.emitted = 0
        self.stopped = False

    def append(self, token: int) -> None:
        """Adds a token without decoding it yet (`flush` decodes what is pending)."""
        self._ids.append(token)

    def extend(self, tokens: list[int]) -> None:
        """Adds tokens without decoding them yet."""
        self._ids.extend(tokens)

    def push(self, token: int) -> str:
        """Adds a token; returns the text that is now safe to send (maybe empty)."""
        self._ids.append(token)
        return self.advance()

    def advance(self) -> str:
        """Decodes the tokens appended since the last time, together (one decode for all);
        returns the text that is now safe to send (maybe empty)."""
        return self._advance_to(len(self._ids))

    def advance_each(self) -> list[str]:
        """Like `advance`, token by token: each token's text (those that complete none, as a
        half of a character, give none)."""
        deltas = [self._advance_to(end) for end in range(self._seen + 1, len(self._ids) + 1)]
        return [d for d in deltas if d]

    def _advance_to(self, end: int) -> str:
        if self.stopped or end <= self._seen:
            return ""
        self._seen = end
        decode = self._tokenizer.decode
        before = decode(self._ids[self._prefix : self._read], skip_special_tokens=True)
        after = decode(self._ids[self._prefix : end], skip_special_tokens=True)
        if len(after) > len(before) and not after.endswith(REPLACEMENT):
            self._decoded += after[len(before) :]
            self._prefix, self._read = self._read, end
        text = self._decoded
        for stop in self._stop:
            at = text.find(stop, max(0, self.emitted - len(stop)))
            if at != -1:
                text, self.stopped = text[:at], True
        self.text = text
        if self.stopped:
            return self._take(len(text))
        return self._take(len(text) - self._partial_stop(text))

    def flush(self) -> str:
        """At the end: whatever was held back (an unfinished character included)."""
        if not self.stopped and self._read < len(self._ids):
            tail = self._tokenizer.decode(self._ids[self._prefix :], skip_special_tokens=True)
            head = self._tokenizer.decode(
                self._ids[self._prefix : self._read], skip_special_tokens=True
            )
            self._decoded += tail[len(head) :]
            self.text = self._decoded
            self._prefix = self._read = self._seen = len(self._ids)  # all of it is in the text
        return self._take(len(self.text))

    def _partial_stop(self, text: str) -> int:
        """Length of the longest end of `text` that begins some stop sequence."""
        longest = 0
        for stop in self._stop:
            for n in range(min(len(stop) - 1, len(text)), longest, -1):
                if text.endswith(stop[:n]):
                    longest = n
                    break
        return longest

    def _take(self, upto: int) -> str:
        if upto <= self.emitted:
            return ""
        delta = self.text[self.emitted : upto]
        self.emitted = upto
        return delta

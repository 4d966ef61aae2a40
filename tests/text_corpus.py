"""The test corpus is the package's own (inferd.corpus): stdlib docstrings + hard cases."""

from inferd.corpus import HARD_CASES, sentences

__all__ = ["HARD_CASES", "sentences"]

"""The test corpus is the package's own (inferd.tools.corpus): stdlib docstrings + hard cases."""

from inferd.tools.corpus import HARD_CASES, sentences

__all__ = ["HARD_CASES", "sentences"]

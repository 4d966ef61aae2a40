"""Varied real sentences, taken from the standard library's docstrings (present on every machine),
plus hand-picked hard cases (emoji, CJK, combining marks). Used for test and benchmark texts, for
sample sets of `inferd quantize` and as a training corpus for the demo generator."""

from __future__ import annotations

import importlib
import inspect
import re

MODULES = [
    "os",
    "json",
    "collections",
    "itertools",
    "string",
    "textwrap",
    "functools",
    "pathlib",
    "random",
    "statistics",
    "fractions",
    "decimal",
    "datetime",
    "calendar",
    "heapq",
    "bisect",
    "shutil",
    "tempfile",
    "argparse",
    "logging",
    "csv",
    "zipfile",
    "email.message",
    "http.client",
    "urllib.parse",
    "asyncio.queues",
    "threading",
    "subprocess",
    "difflib",
    "inspect",
]

MORE_MODULES = [
    "typing",
    "unittest",
    "io",
    "re",
    "socket",
    "sqlite3",
    "xml.etree.ElementTree",
    "pickle",
    "copy",
    "enum",
    "dataclasses",
    "contextlib",
    "operator",
    "html",
    "http.server",
    "smtplib",
    "tarfile",
    "gzip",
    "configparser",
    "optparse",
    "pdb",
    "doctest",
    "ast",
    "dis",
    "tokenize",
    "multiprocessing",
    "concurrent.futures",
    "asyncio",
    "email",
    "mailbox",
    "imaplib",
    "ssl",
    "selectors",
    "sched",
    "queue",
    "weakref",
    "types",
    "abc",
    "numbers",
    "cmath",
    "locale",
    "gettext",
    "codecs",
    "unicodedata",
    "stringprep",
    "struct",
    "array",
    "pprint",
    "reprlib",
    "graphlib",
    "zoneinfo",
    "ipaddress",
    "hashlib",
    "hmac",
    "secrets",
    "uuid",
    "base64",
    "binascii",
    "quopri",
    "mimetypes",
    "wave",
    "colorsys",
    "shlex",
    "cmd",
    "code",
    "codeop",
    "timeit",
    "trace",
    "tracemalloc",
    "warnings",
    "traceback",
    "gc",
    "site",
    "sysconfig",
    "importlib",
    "pkgutil",
    "modulefinder",
    "runpy",
    "zipimport",
    "glob",
    "fnmatch",
    "filecmp",
    "linecache",
    "stat",
]

HARD_CASES = [
    "Party time 🎉🚀✨ with emoji everywhere 😀",
    "東京は日本の首都です。今日はいい天気ですね。",
    "这是一个中文句子，用来测试分词。",  # noqa: RUF001  (a real CJK comma)
    "Café naïve résumé coöperate — e\u0301 with a combining accent",
    "Ελληνικά και русский текст в одном предложении.",
    "ok",
    "A",
    "Numbers 3.14159 and 2,718 and 1e-9 mixed in.",
    "URLs like https://example.com/path?q=1&x=2 and e-mails a@b.co",
    "   leading and trailing spaces   ",
]


def sentences(count: int) -> list[str]:
    """Up to `count` distinct first sentences of stdlib docstrings, in a stable order."""
    found: list[str] = []
    seen: set[str] = set()
    for module_name in MODULES:
        module = importlib.import_module(module_name)
        for _, member in sorted(inspect.getmembers(module), key=lambda m: m[0]):
            doc = inspect.getdoc(member) if callable(member) else None
            if not doc:
                continue
            first = re.split(r"(?<=[.!?])\s", doc.strip().replace("\n", " "), maxsplit=1)[0]
            if 20 <= len(first) <= 300 and first not in seen:
                seen.add(first)
                found.append(first)
                if len(found) >= count:
                    return found
    return found


def docstrings(max_chars: int) -> list[str]:
    """Whole docstrings (paragraphs joined, as prose) of stdlib modules and their members,
    distinct, in a stable order, up to about `max_chars` characters in all: the demo
    generator's training text."""
    found: list[str] = []
    seen: set[str] = set()
    total = 0
    for module_name in MODULES + MORE_MODULES:
        try:
            module = importlib.import_module(module_name)
        except ImportError:  # a stripped-down Python may lack a module or two
            continue
        members = [module, *(m for _, m in sorted(inspect.getmembers(module), key=lambda m: m[0]))]
        for member in members:
            doc = inspect.getdoc(member) if callable(member) or member is module else None
            if not doc or len(doc) < 40 or doc in seen:
                continue
            seen.add(doc)
            found.append(doc.strip())
            total += len(doc)
            if total >= max_chars:
                return found
    return found

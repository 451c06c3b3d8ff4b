"""32 distinct code prompts for the server benchmark: rewrite-a-function prompts (where
copying from the context pays) and open continuations. Every request in a level gets its
own prompt, so methods that learn across requests (ngram-mod) gain nothing from repeats."""
from __future__ import annotations

from specserve.commands.demo import DEMO_PROMPT

# functions the model sees and is then asked to write again under a new name
EDITS = [
    ('''def chunked(items, size):
    """Split items into lists of at most size elements."""
    if size < 1:
        raise ValueError("size must be at least 1")
    chunk = []
    for item in items:
        chunk.append(item)
        if len(chunk) == size:
            yield chunk
            chunk = []
    if chunk:
        yield chunk
''', "def chunked(", "def chunked_list("),
    ('''def read_config(path, defaults=None):
    """Read key = value lines from a file into a dict."""
    config = dict(defaults or {})
    with open(path, encoding="utf-8") as f:
        for line in f:
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            key, _, value = line.partition("=")
            config[key.strip()] = value.strip()
    return config
''', "def read_config(", "def read_settings("),
    ('''class Counter:
    """Count hashable items."""

    def __init__(self):
        self.counts = {}

    def add(self, item, n=1):
        self.counts[item] = self.counts.get(item, 0) + n

    def most_common(self, k):
        return sorted(self.counts.items(), key=lambda kv: kv[1], reverse=True)[:k]
''', "class Counter:", "class Tally:"),
    ('''def flatten(nested):
    """Yield the leaves of arbitrarily nested lists and tuples."""
    for item in nested:
        if isinstance(item, (list, tuple)):
            yield from flatten(item)
        else:
            yield item
''', "def flatten(", "def iter_leaves("),
]

# open continuations: a header (and sometimes a docstring), the model writes the body
CONTINUATIONS = [
    "import os\nimport sys\n\n\ndef main(argv):\n",
    "def parse_header(line):\n    \"\"\"Parse a Content-type like header into a value and a dict of parameters.\"\"\"\n",
    "class LRUCache:\n    \"\"\"A least-recently-used cache.\"\"\"\n\n    def __init__(self, capacity):\n",
    "def walk(top, topdown=True, onerror=None):\n",
    "def is_palindrome(text):\n",
    "def gcd(a, b):\n    \"\"\"Return the greatest common divisor of a and b.\"\"\"\n",
    "def read_lines(path):\n    \"\"\"Return the lines of a text file without their line endings.\"\"\"\n",
    "class Stack:\n    \"\"\"A last-in, first-out stack.\"\"\"\n\n    def __init__(self):\n",
    "def format_size(num_bytes):\n    \"\"\"Format a byte count as a human-readable string.\"\"\"\n",
    "def merge_dicts(*dicts):\n",
    "import re\n\n\ndef split_words(text):\n",
    "def binary_search(items, target):\n    \"\"\"Return the index of target in the sorted list items, or -1.\"\"\"\n",
    "class Point:\n    def __init__(self, x, y):\n",
    "def unique(iterable):\n    \"\"\"Yield the items of iterable once each, in order.\"\"\"\n",
    "import json\n\n\ndef load_json(path):\n",
    "def fibonacci(n):\n",
    "def transpose(matrix):\n",
    "class Timer:\n    \"\"\"Context manager that measures elapsed time.\"\"\"\n\n    def __enter__(self):\n",
    "def count_words(text):\n    \"\"\"Return a dict mapping each word to its number of occurrences.\"\"\"\n",
    "def parse_args(argv=None):\n    import argparse\n",
    "def retry(func, attempts=3):\n",
    "import hashlib\n\n\ndef file_digest(path):\n",
    "def clamp(value, low, high):\n",
    "class Queue:\n    def __init__(self):\n        self.items = []\n\n    def put(self, item):\n",
    "def camel_to_snake(name):\n",
    "def pairwise(iterable):\n",
    "def main():\n    import doctest\n",
]


def prompts() -> list[str]:
    out = [DEMO_PROMPT]
    for source, old, new in EDITS:
        first, second, _ = source.split("\n", 2)
        out.append(source + "\n\n" + first.replace(old, new) + "\n" + second + "\n")
    return out + CONTINUATIONS

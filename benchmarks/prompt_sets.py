"""Prompt sets shared by the benchmark scripts (run them from the repository root:
`python benchmarks/<script>.py`, which puts this folder on the import path).

CODE_PROMPTS open Python code for the model to continue. TEXT_PROMPTS are the bundled code
model's free text: docstrings and comments, prose that the model has to invent rather than copy.
"""
CODE_PROMPTS = [
    "import os\nimport sys\n\n\ndef main(argv):\n",
    "class LRUCache:\n    \"\"\"A least-recently-used cache.\"\"\"\n\n    def __init__(self, capacity):\n",
    "def parse_header(line):\n    \"\"\"Parse a Content-type like header.\"\"\"\n",
    "    def test_roundtrip(self):\n        data = b'hello world'\n",
    "def _format_time(seconds):\n",
    "from collections import namedtuple\n\nPoint = namedtuple('Point', ['x', 'y'])\n\n\n",
    "    try:\n        import zlib\n    except ImportError:\n",
    "def walk(top, topdown=True, onerror=None):\n",
]

TEXT_PROMPTS = [
    '"""Utilities for reading and writing configuration files.\n\nThis module provides',
    "# The following functions are used to",
    '"""\nA simple queue for passing messages between threads.\n\nThe queue',
    "    \"\"\"Return the number of items in the collection.\n\n    If the collection is empty,",
    "# Note: this is not thread safe. If you need",
    '"""Tests for the text wrapping module.\n\nThese tests check that',
    "    # We cannot use the default encoding here because",
    '"""Helpers for working with dates and times.\n\nAll functions in this module',
]

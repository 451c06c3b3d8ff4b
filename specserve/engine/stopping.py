"""Stop strings: find them in the generated text as it grows, and hold back a trailing
partial match from streaming clients until it is known not to be a stop string."""
from __future__ import annotations


class StopChecker:
    def __init__(self, stop: list[str]):
        self.stop = list(stop)
        self.longest = max((len(s) for s in self.stop), default=0)

    def push(self, request, delta: str) -> str | None:
        """Append `delta` to request.text; returns the stop string hit (text cut before it) or None."""
        if not delta:
            return None
        start = max(0, len(request.text) - self.longest + 1)
        request.text += delta
        if not self.stop:
            return None
        tail = request.text[start:]
        best = None
        for s in self.stop:
            i = tail.find(s)
            if i >= 0 and (best is None or i < best[0]):
                best = (i, s)
        if best is not None:
            request.text = request.text[:start + best[0]]
            request.hold = 0
            return best[1]
        request.hold = self._partial_suffix(request.text)
        return None

    def _partial_suffix(self, text: str) -> int:
        """Length of the longest suffix of text that is a proper prefix of a stop string."""
        for n in range(min(self.longest - 1, len(text)), 0, -1):
            suffix = text[-n:]
            if any(s.startswith(suffix) for s in self.stop):
                return n
        return 0

"""Typed access to a JSON request body: every getter names the field when a value is wrong.

JSON null counts as absent (the default applies), as in OpenAI's API. Booleans are never
accepted as numbers, and integers must be JSON integers.
"""
from __future__ import annotations

import json
import math

from .errors import ApiError, bad_request

JSON_TYPE_NAMES = {bool: "a boolean", int: "an integer", float: "a number", str: "a string",
                   list: "an array", dict: "an object", type(None): "null"}


def describe(value) -> str:
    text = json.dumps(value, ensure_ascii=False)
    if len(text) > 40:
        text = text[:37] + "..."
    return f"{JSON_TYPE_NAMES.get(type(value), type(value).__name__)} ({text})"


MAX_DEPTH = 100          # nesting of objects and arrays; real requests stay far below


def parse_json_object(raw: bytes) -> dict:
    if not raw.strip():
        raise bad_request("the request body is empty; expected a JSON object", code="invalid_json")
    try:
        data = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise bad_request(f"the request body is not valid JSON: {exc}", code="invalid_json") from None
    except RecursionError:
        raise bad_request(f"the request body is nested more than {MAX_DEPTH} levels deep",
                          code="invalid_json") from None
    if not isinstance(data, dict):
        raise bad_request(f"the request body must be a JSON object, got {describe(data)}", code="invalid_json")
    check_json_values(data)
    return data


def check_json_values(data: dict) -> None:
    """Reject what JSON can carry but no later step can handle: nesting deeper than MAX_DEPTH and
    strings with unpaired UTF-16 surrogates ("\\ud800" alone is valid JSON, but not text)."""
    stack = [(data, "", 1)]
    while stack:
        value, path, depth = stack.pop()
        if depth > MAX_DEPTH:
            raise bad_request(f"the request body is nested more than {MAX_DEPTH} levels deep", code="invalid_json")
        items = value.items() if isinstance(value, dict) else enumerate(value)
        for key, item in items:
            where = f"{path}.{key}" if isinstance(key, str) and path else f"{path}[{key}]" if path else str(key)
            for text in ((key, item) if isinstance(key, str) else (item,)):
                if isinstance(text, str) and not _encodable(text):
                    raise bad_request(f"'{_printable(where)}' contains an unpaired UTF-16 surrogate, which is not "
                                      f"text", _printable(where.split(".")[0].split("[")[0]), "invalid_json")
            if isinstance(item, (dict, list)):
                stack.append((item, where, depth + 1))


def _encodable(text: str) -> bool:
    try:
        text.encode("utf-8")
        return True
    except UnicodeEncodeError:
        return False


def _printable(text: str) -> str:
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


class Body:
    def __init__(self, data: dict):
        self.data = data
        self.seen: set[str] = set()

    def raw(self, name: str):
        self.seen.add(name)
        return self.data.get(name)

    def _type_error(self, name: str, expected: str, value) -> ApiError:
        return bad_request(f"'{name}' must be {expected}, got {describe(value)}", name, "invalid_type")

    def integer(self, name: str, default: int | None = None, minimum: int | None = None,
                maximum: int | None = None) -> int | None:
        value = self.raw(name)
        if value is None:
            return default
        if isinstance(value, bool) or not isinstance(value, int):
            raise self._type_error(name, "an integer", value)
        if minimum is not None and value < minimum:
            raise bad_request(f"'{name}' must be >= {minimum}, got {value}", name)
        if maximum is not None and value > maximum:
            raise bad_request(f"'{name}' must be <= {maximum}, got {value}", name)
        return value

    def number(self, name: str, default: float | None = None, minimum: float | None = None,
               maximum: float | None = None) -> float | None:
        value = self.raw(name)
        if value is None:
            return default
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise self._type_error(name, "a finite number", value)
        if minimum is not None and value < minimum:
            raise bad_request(f"'{name}' must be >= {minimum}, got {value}", name)
        if maximum is not None and value > maximum:
            raise bad_request(f"'{name}' must be <= {maximum}, got {value}", name)
        return float(value)

    def boolean(self, name: str, default: bool = False) -> bool:
        value = self.raw(name)
        if value is None:
            return default
        if not isinstance(value, bool):
            raise self._type_error(name, "a boolean", value)
        return value

    def string(self, name: str, default: str | None = None) -> str | None:
        value = self.raw(name)
        if value is None:
            return default
        if not isinstance(value, str):
            raise self._type_error(name, "a string", value)
        return value

    def obj(self, name: str) -> dict:
        value = self.raw(name)
        if value is None:
            return {}
        if not isinstance(value, dict):
            raise self._type_error(name, "an object", value)
        return value

    def strings(self, name: str) -> list[str]:
        """A string or an array of strings (`stop`)."""
        value = self.raw(name)
        if value is None:
            return []
        if isinstance(value, str):
            return [value]
        if not isinstance(value, list) or not all(isinstance(s, str) for s in value):
            raise self._type_error(name, "a string or an array of strings", value)
        return value

    def token_ids(self, name: str) -> list[int]:
        value = self.raw(name)
        if value is None:
            return []
        if not isinstance(value, list) or any(isinstance(t, bool) or not isinstance(t, int) or t < 0 for t in value):
            raise self._type_error(name, "an array of non-negative integers", value)
        return value

    def unsupported(self, name: str, allowed: tuple = (None,), what: str | None = None) -> None:
        """A field this server does not implement: accepted only at its neutral value(s)."""
        value = self.raw(name)
        if value not in allowed and not (isinstance(value, (list, dict)) and not value):
            raise bad_request(f"'{name}' is not supported by this server{what or ''} (got {describe(value)})",
                              name, "unsupported_parameter")

    def reject_unknown(self, ignored: frozenset[str] = frozenset()) -> None:
        """OpenAI rejects arguments it does not know; so do the /v1 routes."""
        for name in self.data:
            if name not in self.seen and name not in ignored:
                raise bad_request(f"Unrecognized request argument supplied: {name}", name, "unknown_parameter")

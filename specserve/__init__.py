"""specserve: a speculative-decoding inference engine and server on PyTorch."""
from .engine.request import RequestOutput
from .errors import SpecServeError
from .llm import LLM
from .sampling import SamplingParams

__all__ = ["LLM", "SamplingParams", "RequestOutput", "SpecServeError"]
__version__ = "0.1.0"

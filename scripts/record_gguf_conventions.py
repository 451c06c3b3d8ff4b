"""Record what llama.cpp's converter writes, for tests/test_gguf_conventions.py (run once, by hand).

Needs llama.cpp (source `LLAMACPP_SRC`, converter environment `GGUF_VENV`, converted bundled files in
`GGUF_DIR`; `source ../shared/tools/llamacpp-peer.sh` sets them up, see docs/llamacpp.md). Records, in
tests/data/gguf_conventions.json:
  * the bundled model (f32, bf16) and its drafters as converted into GGUF_DIR;
  * the probe checkpoints of tests/support/gguf_probes.py (llama, qwen2, qwen3), converted here.

    python scripts/record_gguf_conventions.py
"""
from __future__ import annotations

import json
import os
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from support.gguf_conventions import DATA, convert_with_llamacpp, converter_available, describe  # noqa: E402
from support.gguf_probes import PROBES, write_probe  # noqa: E402

BUNDLED = ("stdlib-coder-f32", "stdlib-coder-bf16", "stdlib-coder-draft-f32", "stdlib-coder-eagle3-f32",
           "stdlib-coder-dflash-f32", "stdlib-coder-dspark-f32")


def main() -> int:
    gguf_dir = os.environ.get("GGUF_DIR")
    if not gguf_dir or not converter_available():
        print("needs GGUF_DIR, GGUF_VENV and LLAMACPP_SRC (source ../shared/tools/llamacpp-peer.sh)")
        return 1
    record = {"bundled": {}, "probes": {}}
    for name in BUNDLED:
        record["bundled"][name] = describe(Path(gguf_dir) / f"{name}.gguf")
    with tempfile.TemporaryDirectory() as tmp:
        for name in PROBES:
            src = write_probe(Path(tmp) / name, name)
            out = convert_with_llamacpp(src, Path(tmp) / f"{name}.gguf")
            record["probes"][name] = describe(out, probe_rows=True)
    DATA.parent.mkdir(parents=True, exist_ok=True)
    DATA.write_text(json.dumps(record, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    print(f"wrote {DATA} ({DATA.stat().st_size // 1024} KB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())

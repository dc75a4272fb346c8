"""Copy the subset of the shared datasets that the demo build needs into `demo/data/`.

Run once by a maintainer (`python -m demo.vendor --shared ../shared`); the build itself only
reads `demo/data/`. Records keep their ids; long prompts keep head and tail and long responses
keep their head (see `demo/data/SOURCES.md`), which bounds the repository size and matches the
short sequences the demo target is trained on.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from demo.domains import DATA_DIR, DOMAINS
from demo.records import cap_prompt, cap_response, read_jsonl, write_jsonl

PROMPT_CHARS = 1600
RESPONSE_CHARS = 1600


def _capped(row: dict) -> dict:
    return {
        "id": row["id"],
        "prompt": cap_prompt(row["prompt"], PROMPT_CHARS),
        "response": cap_response(row["response"], RESPONSE_CHARS),
        "source": row["source"],
    }


def vendor(shared_data: Path, out_dir: Path = DATA_DIR) -> None:
    for split in ("corpora", "eval"):
        for domain in DOMAINS:
            rows = [_capped(r) for r in read_jsonl(shared_data / split / f"{domain}.jsonl")]
            write_jsonl(out_dir / split / f"{domain}.jsonl", rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shared", type=Path, default=Path("../shared"))
    args = parser.parse_args()
    vendor(args.shared / "data")


if __name__ == "__main__":
    main()
